"""Helpers every layer shares: params, manifests, storage, tables, seeding and DP randomness, MLflow tracking and registry, parallel workers, progress."""

"""Helpers shared by the stages: params, manifests, storage, seeding, tracking, models."""

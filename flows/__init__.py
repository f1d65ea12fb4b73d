"""Orchestration: the command line and the pipeline runner. Stages compute in ``tasks``."""

"""privhar stages: one module per stage, pure functions plus a thin entry point."""

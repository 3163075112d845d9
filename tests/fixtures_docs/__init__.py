"""A small idempotent server for the documentation tests (golden files, CLI, mkdocs plugin)."""

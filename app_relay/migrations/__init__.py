"""The record's Alembic migrations; the store runs them on start."""

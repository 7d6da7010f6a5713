"""A real Alembic project for tests/integration/test_alembic.py (``alembic upgrade head``)."""

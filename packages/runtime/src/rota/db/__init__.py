"""PostgreSQL through SQLAlchemy 2 async + asyncpg: one schema per service, Alembic migrations."""

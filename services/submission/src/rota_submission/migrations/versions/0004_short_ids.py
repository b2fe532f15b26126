"""Jobs found by the end of their id (their short id) as fast as by its start.

Revision ID: 0004
Revises: 0003
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

SCHEMA = "submission"


def upgrade() -> None:
    # A UUIDv7 starts with its timestamp, so its tail is what tells jobs apart: look it up
    # as a prefix of the reversed id, which a pattern-ops index serves.
    op.execute(f"CREATE INDEX IF NOT EXISTS jobs_id_reversed ON {SCHEMA}.jobs"
               " (reverse(job_id) text_pattern_ops)")


def downgrade() -> None:
    op.execute(f"DROP INDEX IF EXISTS {SCHEMA}.jobs_id_reversed")

"""Acks are verified by the executor: the coordinator keeps no run token hashes, and so no
record of when a run started.

Revision ID: 0004
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

SCHEMA = "preemption"


def upgrade() -> None:
    op.drop_column("runs", "token_sha256", schema=SCHEMA)
    op.drop_column("runs", "started_at", schema=SCHEMA)

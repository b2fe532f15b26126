"""Run tokens (until StartRun is sent) and the decision log.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SCHEMA = "scheduler"


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("run_id", sa.Text, primary_key=True),
        sa.Column("job_id", sa.Text, nullable=False),
        sa.Column("proposal_id", sa.Text, nullable=False),
        sa.Column("token", sa.Text, nullable=False),
        sa.Column("proposed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("start_sent_at", sa.DateTime(timezone=True)),
        schema=SCHEMA,
    )
    op.create_table(
        "decisions",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("cycle_id", sa.Text, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("job_id", sa.Text, nullable=False),
        sa.Column("decision", sa.Text, nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("factors", postgresql.JSONB, nullable=False),
        sa.Column("details", postgresql.JSONB, nullable=False),
        schema=SCHEMA,
    )
    op.create_index("decisions_by_job", "decisions", ["job_id", "id"], schema=SCHEMA)
    op.create_index("decisions_by_time", "decisions", ["at"], schema=SCHEMA)

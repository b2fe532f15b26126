"""Jobs, their event history (the read model), the outbox and the inbox.

Revision ID: 0001
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from rota.db.tables import create_outbox_and_inbox

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

SCHEMA = "submission"


def upgrade() -> None:
    create_outbox_and_inbox(SCHEMA)
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.Text, primary_key=True),
        sa.Column("team", sa.Text, nullable=False),
        sa.Column("user_name", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("queue", sa.Text, nullable=False),
        sa.Column("flavor", sa.Text, nullable=False),
        sa.Column("workers", sa.Integer, nullable=False),
        sa.Column("gpus_per_worker", sa.Integer, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("submission_id", sa.Text, nullable=False),
        sa.Column("spec_hash", sa.Text, nullable=False),
        sa.Column("spec", postgresql.JSONB, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True)),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
        sa.Column("run_id", sa.Text),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("resume_from", sa.Text),
        sa.Column("wait", postgresql.JSONB),
        sa.Column("detail", sa.Text),
        sa.UniqueConstraint("team", "submission_id", name="jobs_submission_once"),
        sa.CheckConstraint(
            "state IN ('pending','admitted','running','preempting','finished','failed','cancelled')",
            name="jobs_state_known",
        ),
        schema=SCHEMA,
    )
    op.create_index("jobs_by_state", "jobs", ["state", "queue", "team"], schema=SCHEMA)
    op.create_table(
        "job_events",
        sa.Column("event_id", sa.Text, primary_key=True),
        sa.Column("job_id", sa.Text, nullable=False),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("data", postgresql.JSONB, nullable=False),
        schema=SCHEMA,
    )
    op.create_index("job_events_by_job", "job_events", ["job_id", "occurred_at"], schema=SCHEMA)

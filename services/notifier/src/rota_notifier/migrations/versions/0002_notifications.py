"""Notifications (the delivery log and dead letter) and the notifier's view of jobs.

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SCHEMA = "notifier"


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.Text, primary_key=True),
        sa.Column("name", sa.Text),
        sa.Column("team", sa.Text),
        sa.Column("user_name", sa.Text),
        sa.Column("queue", sa.Text),
        sa.Column("submitted_at", sa.DateTime(timezone=True)),
        sa.Column("pending_since", sa.DateTime(timezone=True)),
        sa.Column("episode", sa.Integer, nullable=False, server_default="0"),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        schema=SCHEMA,
    )
    op.create_table(
        "notifications",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("dedup_key", sa.Text, nullable=False),
        sa.Column("recipient", sa.Text, nullable=False),
        sa.Column("channel", sa.Text, nullable=False),
        sa.Column("address", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("event_id", sa.Text),
        sa.Column("job_id", sa.Text),
        sa.Column("team", sa.Text),
        sa.Column("context", postgresql.JSONB, nullable=False),
        sa.Column("bypass_rate_limit", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True)),
        sa.Column("sent_at", sa.DateTime(timezone=True)),
        sa.Column("last_error", sa.Text),
        sa.Column("digest_id", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("dedup_key", "recipient", "channel", name="notifications_once"),
        sa.CheckConstraint(
            "status IN ('pending','sending','retrying','sent','held','digested','dead')",
            name="notifications_status_known",
        ),
        schema=SCHEMA,
    )
    op.create_index(
        "notifications_due", "notifications", ["next_attempt_at"], schema=SCHEMA,
        postgresql_where=sa.text("status IN ('pending','sending','retrying','held')"),
    )
    op.create_index(
        "notifications_by_recipient", "notifications", ["recipient", "channel", "sent_at"],
        schema=SCHEMA,
    )
    op.create_index("notifications_by_status", "notifications", ["status", "created_at"],
                    schema=SCHEMA)

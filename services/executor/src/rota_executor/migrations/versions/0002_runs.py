"""The executor's runs: one row per run, from StartRun to its end.

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SCHEMA = "executor"


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("run_id", sa.Text, primary_key=True),
        sa.Column("job_id", sa.Text, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("backend", sa.Text, nullable=False),
        sa.Column("spec", postgresql.JSONB, nullable=False),
        sa.Column("placement", postgresql.JSONB, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        # The sim backend acknowledges notices itself after a restart, so it needs the token.
        sa.Column("run_token", sa.Text, nullable=False),
        sa.Column("token_sha256", sa.Text, nullable=False),
        sa.Column("resume_from", sa.Text),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("pids", postgresql.JSONB),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_checkpoint_uri", sa.Text),
        sa.Column("last_checkpoint_at", sa.DateTime(timezone=True)),
        sa.Column("last_checkpoint_progress_s", sa.Float),
        sa.Column("notice_id", sa.Text),
        sa.Column("notice_at", sa.DateTime(timezone=True)),
        sa.Column("notice_acked_at", sa.DateTime(timezone=True)),
        sa.Column("stop_reason", sa.Text),
        sa.Column("stop_forced", sa.Boolean),
        sa.Column("stop_requested_at", sa.DateTime(timezone=True)),
        sa.Column("ended_at", sa.DateTime(timezone=True)),
        sa.Column("exit_code", sa.Integer),
        sa.Column("outcome", sa.Text),
        sa.Column("detail", sa.Text),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "state IN ('running', 'stopping', 'finished', 'failed', 'stopped')", name="runs_state"
        ),
        schema=SCHEMA,
    )
    op.create_index("runs_job", "runs", ["job_id"], schema=SCHEMA)
    op.create_index(
        "runs_live", "runs", ["run_id"], schema=SCHEMA,
        postgresql_where=sa.text("state IN ('running', 'stopping')"),
    )

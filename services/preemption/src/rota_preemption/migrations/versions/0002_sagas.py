"""Preemption sagas (plans and victims) and the coordinator's view of runs and cancellations.

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SCHEMA = "preemption"
TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("run_id", sa.Text, primary_key=True),
        sa.Column("job_id", sa.Text, nullable=False),
        sa.Column("token_sha256", sa.Text),
        sa.Column("started_at", TS),
        sa.Column("ended", sa.Text),
        sa.Column("ended_at", TS),
        sa.CheckConstraint("ended IN ('finished','failed','stopped')", name="runs_end_known"),
        schema=SCHEMA,
    )
    op.create_table(
        "cancelled_jobs",
        sa.Column("job_id", sa.Text, primary_key=True),
        sa.Column("cancelled_at", TS, nullable=False),
        schema=SCHEMA,
    )
    op.create_table(
        "plans",
        sa.Column("plan_id", sa.Text, primary_key=True),
        sa.Column("preemptor_job_id", sa.Text, nullable=False),
        sa.Column("preemptor_queue", sa.Text, nullable=False),
        sa.Column("preemptor_team", sa.Text),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("completed_at", TS),
        sa.CheckConstraint("state IN ('noticing','stopping','completed','aborted')",
                           name="plans_state_known"),
        schema=SCHEMA,
    )
    op.create_index("plans_open_by_preemptor", "plans", ["preemptor_job_id"], schema=SCHEMA,
                    postgresql_where=sa.text("state IN ('noticing','stopping')"))
    op.create_index("plans_by_created", "plans", ["created_at"], schema=SCHEMA)
    op.create_table(
        "victims",
        sa.Column("plan_id", sa.Text, sa.ForeignKey(f"{SCHEMA}.plans.plan_id"), primary_key=True),
        sa.Column("run_id", sa.Text, primary_key=True),
        sa.Column("job_id", sa.Text, nullable=False),
        sa.Column("team", sa.Text, nullable=False),
        sa.Column("queue", sa.Text, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("job_name", sa.Text, nullable=False),
        sa.Column("user_name", sa.Text, nullable=False),
        sa.Column("resumable", sa.Boolean, nullable=False),
        sa.Column("last_checkpoint_uri", sa.Text),
        sa.Column("expected_lost_gpu_seconds", sa.Float, nullable=False),
        sa.Column("notice_id", sa.Text, nullable=False, unique=True),
        sa.Column("grace_s", sa.Float, nullable=False),
        sa.Column("deadline", TS, nullable=False),
        sa.Column("state", sa.Text, nullable=False),
        sa.Column("outcome", sa.Text),
        sa.Column("checkpoint_uri", sa.Text),
        sa.Column("lost_gpu_seconds", sa.Float, nullable=False, server_default="0"),
        sa.Column("noticed_at", TS),
        sa.Column("acked_at", TS),
        sa.Column("stop_sent_at", TS),
        sa.Column("done_at", TS),
        sa.CheckConstraint("state IN ('noticed','stop_sent','done')", name="victims_state_known"),
        sa.CheckConstraint("outcome IN ('acked','forced','finished','aborted')",
                           name="victims_outcome_known"),
        schema=SCHEMA,
    )
    # The timer's query: deadlines of victims still waiting for an acknowledgement.
    op.create_index("victims_due", "victims", ["deadline"], schema=SCHEMA,
                    postgresql_where=sa.text("state = 'noticed'"))
    op.create_index("victims_live_by_run", "victims", ["run_id"], schema=SCHEMA,
                    postgresql_where=sa.text("state <> 'done'"))
    op.create_index("victims_by_job", "victims", ["job_id"], schema=SCHEMA)

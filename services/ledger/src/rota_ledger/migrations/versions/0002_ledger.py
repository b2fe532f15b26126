"""Allocations (one row per GPU), the append-only ledger, decayed usage, and preemption holds.

Revision ID: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SCHEMA = "ledger"


def upgrade() -> None:
    op.create_table(
        "allocations",
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("node", sa.Text, nullable=False),
        sa.Column("gpu", sa.Integer, nullable=False),
        sa.Column("worker", sa.Integer, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("job_id", sa.Text, nullable=False),
        sa.Column("proposal_id", sa.Text, nullable=False),
        sa.Column("plan_id", sa.Text),
        sa.Column("team", sa.Text, nullable=False),
        sa.Column("user_name", sa.Text, nullable=False),
        sa.Column("queue", sa.Text, nullable=False),
        sa.Column("flavor", sa.Text, nullable=False),
        sa.Column("borrowed", sa.Boolean, nullable=False),
        sa.Column("granted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True)),
        sa.Column("release_reason", sa.Text),
        sa.CheckConstraint("gpu >= 0", name="allocations_gpu_index"),
        sa.CheckConstraint("released_at IS NULL OR released_at >= granted_at",
                           name="allocations_release_after_grant"),
        schema=SCHEMA,
    )
    # The guarantee: at most one active allocation per GPU, whatever any scheduler believes.
    op.create_index(
        "allocations_one_active_per_gpu", "allocations", ["node", "gpu"], unique=True,
        schema=SCHEMA, postgresql_where=sa.text("released_at IS NULL"),
    )
    op.create_index("allocations_by_run", "allocations", ["run_id"], schema=SCHEMA)
    op.create_index(
        "allocations_active_by_flavor", "allocations", ["flavor", "team"], schema=SCHEMA,
        postgresql_where=sa.text("released_at IS NULL"),
    )
    op.create_table(
        "entries",
        sa.Column("seq", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("run_id", sa.Text, nullable=False),
        sa.Column("job_id", sa.Text, nullable=False),
        sa.Column("team", sa.Text, nullable=False),
        sa.Column("user_name", sa.Text, nullable=False),
        sa.Column("flavor", sa.Text, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("borrowed_gpus", sa.Integer, nullable=False, server_default="0"),
        sa.Column("gpu_seconds", sa.Float, nullable=False, server_default="0"),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cause_id", sa.Text, nullable=False),
        sa.CheckConstraint("kind IN ('grant','release')", name="entries_kind_known"),
        # Signed: a grant adds GPUs, a release takes them back, so a balanced ledger sums to 0.
        sa.CheckConstraint("(kind = 'grant' AND gpus > 0) OR (kind = 'release' AND gpus < 0)",
                           name="entries_sign"),
        sa.CheckConstraint("gpu_seconds >= 0", name="entries_gpu_seconds"),
        sa.UniqueConstraint("run_id", "kind", name="entries_once_per_run"),
        schema=SCHEMA,
    )
    # Append-only: the ledger is evidence, so the database refuses to rewrite it.
    op.execute(f"""
        CREATE FUNCTION {SCHEMA}.entries_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            RAISE EXCEPTION 'ledger.entries is append-only';
        END $$;
    """)
    op.execute(f"""
        CREATE TRIGGER entries_append_only BEFORE UPDATE OR DELETE ON {SCHEMA}.entries
        FOR EACH ROW EXECUTE FUNCTION {SCHEMA}.entries_append_only();
    """)
    op.create_table(
        "usage",
        sa.Column("team", sa.Text, primary_key=True),
        # '' is the team's own total; any other value is one user of that team.
        sa.Column("user_name", sa.Text, primary_key=True),
        sa.Column("gpu_seconds", sa.Float, nullable=False),
        sa.Column("as_of", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("gpu_seconds >= 0", name="usage_not_negative"),
        schema=SCHEMA,
    )
    op.create_table(
        "holds",
        sa.Column("plan_id", sa.Text, primary_key=True),
        sa.Column("node", sa.Text, primary_key=True),
        sa.Column("gpu", sa.Integer, primary_key=True),
        sa.Column("preemptor_job_id", sa.Text, nullable=False),
        sa.Column("victim_run_id", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        schema=SCHEMA,
    )
    op.create_index("holds_by_gpu", "holds", ["node", "gpu"], schema=SCHEMA)

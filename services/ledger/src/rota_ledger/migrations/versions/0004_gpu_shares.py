"""GPU shares (DECISIONS 66): `allocations.share` (quarters of the GPU; 0 = whole) and
`gpu_claims`, one row per GPU in use, whole or shared with the quarters that shares hold.

A grant claims its GPUs in its own transaction: a whole GPU inserts its claim (a conflict
means the GPU is in use), a share adds its quarters only onto a shared claim with room
(`used + q <= 4`). So the shares on one GPU never exceed 1 and a whole-GPU grant never meets
a share, whatever any scheduler believes; the unique index keeps guarding whole GPUs too.

Revision ID: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

SCHEMA = "ledger"


def upgrade() -> None:
    op.add_column("allocations", sa.Column("share", sa.Integer, nullable=False, server_default="0"),
                  schema=SCHEMA)
    op.create_check_constraint("allocations_share_quarters", "allocations",
                               "share >= 0 AND share < 4", schema=SCHEMA)
    op.drop_index("allocations_one_active_per_gpu", "allocations", schema=SCHEMA)
    op.create_index(
        "allocations_one_active_per_gpu", "allocations", ["node", "gpu"], unique=True,
        schema=SCHEMA, postgresql_where=sa.text("released_at IS NULL AND share = 0"),
    )
    op.create_table(
        "gpu_claims",
        sa.Column("node", sa.Text, primary_key=True),
        sa.Column("gpu", sa.Integer, primary_key=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("used", sa.Integer, nullable=False),
        sa.CheckConstraint("kind IN ('whole', 'shared')", name="gpu_claims_kind"),
        sa.CheckConstraint("used >= 0 AND used <= 4", name="gpu_claims_at_most_one_gpu"),
        sa.CheckConstraint("kind = 'shared' OR used = 4", name="gpu_claims_whole_is_whole"),
        schema=SCHEMA,
    )
    op.execute(
        f"INSERT INTO {SCHEMA}.gpu_claims (node, gpu, kind, used)"
        f" SELECT node, gpu, 'whole', 4 FROM {SCHEMA}.allocations WHERE released_at IS NULL"
    )


def downgrade() -> None:
    op.drop_table("gpu_claims", schema=SCHEMA)
    op.drop_index("allocations_one_active_per_gpu", "allocations", schema=SCHEMA)
    op.create_index(
        "allocations_one_active_per_gpu", "allocations", ["node", "gpu"], unique=True,
        schema=SCHEMA, postgresql_where=sa.text("released_at IS NULL"),
    )
    op.drop_constraint("allocations_share_quarters", "allocations", schema=SCHEMA)
    op.drop_column("allocations", "share", schema=SCHEMA)

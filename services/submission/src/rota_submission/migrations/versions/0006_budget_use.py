"""Each team's use of its GPU-hour budgets, as the scheduler last reported it (`rota queues`).

Revision ID: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

SCHEMA = "submission"


def upgrade() -> None:
    op.create_table(
        "budget_use",
        sa.Column("team", sa.Text, primary_key=True),
        sa.Column("flavor", sa.Text, primary_key=True),
        sa.Column("period", sa.Text, nullable=False),
        sa.Column("period_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resets_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_gpu_hours", sa.Float, nullable=False),
        sa.Column("budget_gpu_hours", sa.Float, nullable=False),
        sa.Column("when_exhausted", sa.Text, nullable=False),
        sa.Column("as_of", sa.DateTime(timezone=True), nullable=False),
        schema=SCHEMA,
    )

"""A GPU share may be a victim (DECISIONS 84): the fraction of its one GPU it frees, beside
`gpus` 0, so the sagas listing shows what was stopped (DECISIONS 86).

Revision ID: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

SCHEMA = "preemption"


def upgrade() -> None:
    op.add_column("victims", sa.Column("gpu_share", sa.Float), schema=SCHEMA)

"""A victim may be shrunk instead of stopped (DECISIONS 81), and a saga may be a grow's
(DECISIONS 82): the workers each restarts with, and the outcomes `shrunk` and `grown`.

Revision ID: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

SCHEMA = "preemption"


def upgrade() -> None:
    op.add_column("victims", sa.Column("shrink_to", sa.Integer), schema=SCHEMA)
    op.add_column("victims", sa.Column("grow_to", sa.Integer), schema=SCHEMA)
    op.drop_constraint("victims_outcome_known", "victims", schema=SCHEMA, type_="check")
    op.create_check_constraint(
        "victims_outcome_known", "victims",
        "outcome IN ('acked','forced','finished','aborted','shrunk','grown')", schema=SCHEMA)

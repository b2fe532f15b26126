"""Each team's submit-rate bucket, and its waiting jobs counted straight off an index.

Revision ID: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

SCHEMA = "submission"


def upgrade() -> None:
    op.create_table(
        "team_intake",
        sa.Column("team", sa.Text, primary_key=True),
        sa.Column("tokens", sa.Float, nullable=False),
        sa.Column("refilled_at", sa.DateTime(timezone=True), nullable=False),
        schema=SCHEMA,
    )
    op.create_index("jobs_pending_by_team", "jobs", ["team"], schema=SCHEMA,
                    postgresql_where=sa.text("state = 'pending'"))


def downgrade() -> None:
    op.drop_index("jobs_pending_by_team", "jobs", schema=SCHEMA)
    op.drop_table("team_intake", schema=SCHEMA)

"""The executor mints run tokens now: the scheduler keeps none, and the published StartRun
rows that carried one go.

Revision ID: 0004
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

SCHEMA = "scheduler"


def upgrade() -> None:
    op.drop_column("runs", "token", schema=SCHEMA)
    op.execute("DELETE FROM scheduler.outbox WHERE published_at IS NOT NULL"
               " AND subject = 'rota.cmd.run.start'")

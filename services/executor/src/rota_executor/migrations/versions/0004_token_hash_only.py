"""Run tokens are kept only as their hash: the clear column goes, and so do published outbox
rows of the acknowledgements that carried one.

Revision ID: 0004
"""

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

SCHEMA = "executor"


def upgrade() -> None:
    op.drop_column("runs", "run_token", schema=SCHEMA)
    op.execute("DELETE FROM executor.outbox WHERE published_at IS NOT NULL"
               " AND subject = 'rota.evt.run.checkpointed'")

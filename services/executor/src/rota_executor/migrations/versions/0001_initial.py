"""The outbox and the inbox of the executor service.

Revision ID: 0001
"""

from rota.db.tables import create_outbox_and_inbox

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    create_outbox_and_inbox("executor")

"""The dead letter: messages that failed on every delivery up to ROTA_MAX_DELIVER.

Revision ID: 0003
"""

from rota.db.tables import create_deadletter

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

SCHEMA = "notifier"


def upgrade() -> None:
    create_deadletter(SCHEMA)

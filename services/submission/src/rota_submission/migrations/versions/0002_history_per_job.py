"""An event may belong to several jobs (a preemption's victims); borrowed GPUs per job.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SCHEMA = "submission"


def upgrade() -> None:
    op.drop_constraint("job_events_pkey", "job_events", schema=SCHEMA, type_="primary")
    op.create_primary_key("job_events_pkey", "job_events", ["event_id", "job_id"], schema=SCHEMA)
    op.add_column("jobs", sa.Column("borrowed_gpus", sa.Integer, nullable=False,
                                    server_default="0"), schema=SCHEMA)

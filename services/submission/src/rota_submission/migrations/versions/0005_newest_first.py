"""`rota jobs` lists newest first: indexes in that order, overall and per team, so the first
page is read straight off an index however many jobs there are.

Revision ID: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

SCHEMA = "submission"


def upgrade() -> None:
    op.create_index("jobs_newest", "jobs", [sa.text("submitted_at DESC"), sa.text("job_id DESC")],
                    schema=SCHEMA)
    op.create_index("jobs_newest_by_team", "jobs",
                    ["team", sa.text("submitted_at DESC"), sa.text("job_id DESC")], schema=SCHEMA)

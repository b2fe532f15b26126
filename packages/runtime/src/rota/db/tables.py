"""Tables every service has in its own schema: the outbox and the processed-message record."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op


def create_outbox_and_inbox(schema: str) -> None:
    """Called from each service's first migration, so the two tables are identical everywhere."""
    op.create_table(
        "outbox",
        sa.Column("seq", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("id", sa.Text, nullable=False, unique=True),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("stream", sa.Text, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("headers", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        schema=schema,
    )
    op.create_index(
        "outbox_unpublished", "outbox", ["seq"], schema=schema,
        postgresql_where=sa.text("published_at IS NULL"),
    )
    op.create_table(
        "processed_messages",
        sa.Column("consumer", sa.Text, primary_key=True),
        sa.Column("message_id", sa.Text, primary_key=True),
        sa.Column("processed_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
        schema=schema,
    )


def outbox_table(metadata: sa.MetaData, schema: str) -> sa.Table:
    return sa.Table(
        "outbox",
        metadata,
        sa.Column("seq", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("id", sa.Text, nullable=False, unique=True),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("stream", sa.Text, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("headers", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now()),
        sa.Column("published_at", sa.DateTime(timezone=True), nullable=True),
        schema=schema,
    )


def processed_table(metadata: sa.MetaData, schema: str) -> sa.Table:
    return sa.Table(
        "processed_messages",
        metadata,
        sa.Column("consumer", sa.Text, primary_key=True),
        sa.Column("message_id", sa.Text, primary_key=True),
        sa.Column("processed_at", sa.DateTime(timezone=True), server_default=sa.func.now()),
        schema=schema,
    )


def _deadletter_columns() -> list[sa.Column[Any]]:
    """One definition for the migrations and the queries (a column belongs to one table, so
    each gets its own)."""
    return [
        sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
        sa.Column("consumer", sa.Text, nullable=False),
        sa.Column("stream", sa.Text, nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("stream_seq", sa.BigInteger, nullable=False),
        sa.Column("deliveries", sa.Integer, nullable=False),
        sa.Column("error_type", sa.Text, nullable=False),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=False),
        sa.Column("payload_bytes", sa.Integer, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.func.now()),
    ]


def create_deadletter(schema: str) -> None:
    """Called from each service's own migration, so the dead letter is the same everywhere."""
    op.create_table("deadletter", *_deadletter_columns(),
                    sa.UniqueConstraint("consumer", "stream_seq"), schema=schema)


def deadletter_table(metadata: sa.MetaData, schema: str) -> sa.Table:
    return sa.Table("deadletter", metadata, *_deadletter_columns(), schema=schema)

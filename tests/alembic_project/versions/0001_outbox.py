"""outbox schema: the snippet of docs/guides/migrations.md (<!-- alembic-revision -->),
verbatim.

Revision ID: 0001_outbox
Revises:
"""

from __future__ import annotations

from outbox.contrib import alembic as outbox_alembic


def upgrade() -> None:
    outbox_alembic.upgrade()  # schema: OUTBOX_SCHEMA, or upgrade(schema="webhooks")


def downgrade() -> None:
    pass  # the outbox schema stays: it may hold undelivered events


revision = "0001_outbox"
down_revision = None
branch_labels = None
depends_on = None

"""The application's own table, created unqualified in the same transaction as 0001.

Revision ID: 0002_orders
Revises: 0001_outbox
"""

from __future__ import annotations

import os

import sqlalchemy as sa
from alembic import op

revision = "0002_orders"
down_revision = "0001_outbox"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table("orders", sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("total", sa.Numeric(10, 2), nullable=False))
    if os.environ.get("TEST_ALEMBIC_FAIL"):  # tests: a failure after the outbox revision
        raise RuntimeError("revision 0002 failed")


def downgrade() -> None:
    op.drop_table("orders")

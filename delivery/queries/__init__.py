"""Every SQL statement of the ``delivery`` package, in one place: this package, one module per
concern (claim, complete, flow, wakeup, maintenance, session, demo), every statement
re-exported here: callers and tests write ``queries.NAME`` (tests/unit/test_house.py checks
that every statement is exported). ``{schema}`` is the quoted schema.
"""

from __future__ import annotations

from outbox.delivery.queries.claim import (
    BUDGET,
    CLAIM,
    CLAIM_FLOOR,
    CLAIM_POSITION,
    GENERIC_PLAN,
)
from outbox.delivery.queries.complete import (
    COMPLETE,
    OPERATIONAL,
    QUARANTINE,
)
from outbox.delivery.queries.demo import (
    DEMO_CREATE_ORDERS,
    DEMO_DROP_SCHEMA,
    DEMO_INSERT_ORDER,
    DEMO_PENDING,
    DEMO_SUMMARY,
)
from outbox.delivery.queries.flow import (
    FLOW_GAUGES,
    PUSH_ENDPOINT,
    THROTTLE,
)
from outbox.delivery.queries.maintenance import (
    AUTOVACUUM_OFF,
    BACKLOG,
    BLOCKED,
    BLOCKED_BODY,
    PRUNE_TRY_LOCK,
    PRUNE_UNLOCK,
    REPAIR_HEADLESS,
    VACUUM_QUEUE,
)
from outbox.delivery.queries.session import (
    BEGIN_READ_COMMITTED,
    COMMIT,
)
from outbox.delivery.queries.wakeup import (
    ANY_DUE,
    NEXT_DUE,
    SESSION_PROBE,
    WAKE_ARM,
    WAKE_DISARM,
    WAKE_HANDOVER,
    WAKE_LISTEN,
    WAKE_LOCK_TIMEOUT,
)

__all__ = [
    "ANY_DUE",
    "AUTOVACUUM_OFF",
    "BACKLOG",
    "BEGIN_READ_COMMITTED",
    "BLOCKED",
    "BLOCKED_BODY",
    "BUDGET",
    "CLAIM",
    "CLAIM_FLOOR",
    "CLAIM_POSITION",
    "COMMIT",
    "COMPLETE",
    "DEMO_CREATE_ORDERS",
    "DEMO_DROP_SCHEMA",
    "DEMO_INSERT_ORDER",
    "DEMO_PENDING",
    "DEMO_SUMMARY",
    "FLOW_GAUGES",
    "GENERIC_PLAN",
    "NEXT_DUE",
    "OPERATIONAL",
    "PRUNE_TRY_LOCK",
    "PRUNE_UNLOCK",
    "PUSH_ENDPOINT",
    "QUARANTINE",
    "REPAIR_HEADLESS",
    "SESSION_PROBE",
    "THROTTLE",
    "VACUUM_QUEUE",
    "WAKE_ARM",
    "WAKE_DISARM",
    "WAKE_HANDOVER",
    "WAKE_LISTEN",
    "WAKE_LOCK_TIMEOUT",
]

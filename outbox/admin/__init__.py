"""Operator operations, shared by the ``outbox`` CLI, the HTTP API, the console and the
portal: each interface parses and prints; these functions check, read and write.

Public modules (each declares its ``__all__``): :mod:`~outbox.admin.endpoints`,
:mod:`~outbox.admin.deadletter` (dead letters, replay, skip), :mod:`~outbox.admin.events`
(the event log and the lists the console pages), :mod:`~outbox.admin.stats`,
:mod:`~outbox.admin.retention`, :mod:`~outbox.admin.secrets` (encryption at rest),
:mod:`~outbox.admin.portal` (portal links and sessions),
:mod:`~outbox.admin.opevents` (operational events) and :mod:`~outbox.admin.migrations`
(the schema). Every function takes the caller's
connection (or URL) and says in its docstring what it commits.
"""

"""Helpers shared by the test suites, one module per concern:

- :mod:`tests.support.pg`: server discovery, the migrated template, per-test databases;
- :mod:`tests.support.workers`: worker settings, endpoints, emitting, running workers;
- :mod:`tests.support.cli`: ``outbox`` commands in-process and as a subprocess;
- :mod:`tests.support.guarded_http`: scripted DNS and recording HTTP/TLS servers;
- :mod:`tests.support.net`: free loopback ports.
"""

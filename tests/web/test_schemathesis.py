"""The OpenAPI document is the contract: schemathesis fuzzes every operation of the operator
and the portal API with all its checks (a fixed seed, 50 examples per operation: about 90 s
on a busy 2-core machine; OUTBOX_FUZZ_EXAMPLES sets another count), so a new route is
fuzzed by default; zero failures.

One check is replaced: schemathesis' "schema-valid request rejected" (positive data
acceptance) by :func:`accepts_valid_input`, the same check except that a refusal for a
reason no schema can state (the SSRF guard, a selection that names nothing, a state
conflict, a cursor this API did not issue) passes when its error code says so. A refusal
for a format the schema states (``invalid_request``, ``invalid_parameter``) still fails.
"""

from __future__ import annotations

import os
from typing import Any

import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from outbox.admin.portal import WebSettings
from tests.web.conftest import TOKEN, World, enter_portal, new_client

EXAMPLES = int(os.environ.get("OUTBOX_FUZZ_EXAMPLES", "50"))
FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
# refusals of schema-valid input for reasons beyond any schema (see the module doc)
SEMANTIC = frozenset({"invalid_endpoint", "invalid_selection", "operation_refused",
                      "invalid_cursor",
                      # a JSON Schema that is no valid draft 2020-12 schema, an example that
                      # does not match it, a NUL nested anywhere in either
                      "invalid_event_type"})
# ... and these invalid_parameter refusals, by their message: a rule across two fields, and
# a field required by the server's configuration (OUTBOX_PUBLIC_URL unset)
SEMANTIC_MESSAGES = ("since must be before until", "base_url: required unless")


def accepts_valid_input(ctx: Any, response: Any, case: Any) -> bool | None:
    """Positive data acceptance, but for the :data:`SEMANTIC` refusals."""
    if response.status_code in (400, 422):
        try:
            error = response.json()["error"]
            code, message = error["code"], error["message"]
        except (ValueError, KeyError, TypeError):
            code, message = None, ""
        if code in SEMANTIC or str(message).startswith(SEMANTIC_MESSAGES):
            return None
    return positive_data_acceptance(ctx, response, case)


def _fuzz(app: FastAPI, portal: bool, headers: dict[str, str]) -> None:
    """Every operation, each with its own bounded, seeded examples (driven here: the
    pytest loader of schemathesis does not run under pytest 9); all failures reported."""
    loaded = schemathesis.openapi.from_asgi("/api/openapi.json", app)
    schema: Any = (loaded.include if portal else loaded.exclude)(path_regex="^/api/portal/")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert operations
    failures = []
    for operation in operations:
        @given(case=operation.as_strategy())
        @FUZZ
        def check(case: Any) -> None:
            case.call_and_validate(headers=headers, excluded_checks=[positive_data_acceptance],
                                   additional_checks=[accepts_valid_input])

        try:
            check()
        except BaseExceptionGroup as exc:
            failures.append(f"{operation.method.upper()} {operation.path}: "
                            f"{[str(e)[:300] for e in exc.exceptions]} {str(exc)[:900]}")
        except Exception as exc:
            failures.append(f"{operation.method.upper()} {operation.path}: {str(exc)[:900]}")
    assert not failures, "\n\n".join(failures)


def test_operator_api(app: FastAPI, world: World) -> None:
    _fuzz(app, False, {"Authorization": f"Bearer {TOKEN}"})


def test_portal_api(app: FastAPI, world: World, web_settings: WebSettings) -> None:
    client: TestClient
    with new_client(app) as client:
        csrf = enter_portal(client, web_settings, "acme")
        cookies = "; ".join(f"{k}={v}" for k, v in client.cookies.items())
    _fuzz(app, True, {"Cookie": cookies, "X-CSRF-Token": csrf})

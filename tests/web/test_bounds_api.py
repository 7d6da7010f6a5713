"""Bad endpoint numbers and headers through the JSON API (operator and portal): a 422
``invalid_endpoint`` naming the field, and nothing stored or changed. The values are sent
as raw JSON, as a client would (``NaN``, ``1e400``: Python's parser reads them as NaN and
infinity)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from outbox.admin.portal import WebSettings
from tests.web.conftest import World, enter_portal, new_client, snapshot

URL = '"url": "http://127.0.0.1:9/new"'
NUMBERS = [
    ('"retry_base_seconds": NaN', "retry_base_seconds"),
    ('"retry_base_seconds": 1e400', "retry_base_seconds"),
    ('"retry_cap_seconds": -Infinity', "retry_cap_seconds"),
    ('"retry_cap_seconds": 1e300', "retry_cap_seconds"),
    ('"timeout_seconds": 1e20', "timeout_seconds"),
    ('"timeout_seconds": 0', "timeout_seconds"),
    ('"max_in_flight": 2147483648', "max_in_flight"),
    ('"max_in_flight": 1.5', "max_in_flight"),
    ('"max_attempts": true', "max_attempts"),
    ('"max_attempts": "5"', "max_attempts"),
]
HEADERS = [
    ('"headers": {"X-A": "a\\u0001b"}', "headers"),
    ('"headers": {"X-A": "a\\u007fb"}', "headers"),
    ('"headers": {"Expect": "100-continue"}', "headers"),
    ('"headers": {"Upgrade": "h2c"}', "headers"),
    ('"headers": {"TE": "trailers"}', "headers"),
    ('"headers": {"webhook-id": "x"}', "headers"),
    ('"headers": {"a b": "x"}', "headers"),
    ('"headers": {"X-A": 1}', "headers"),
]


def _refused(db_url: str, client: TestClient, method: str, path: str, body: str,
             field: str) -> None:
    before = snapshot(db_url)
    answer = client.request(method, path, content=body.encode(),
                            headers={"Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_endpoint" and field in error["message"], error
    assert snapshot(db_url) == before


@pytest.mark.parametrize(("field", "name"), NUMBERS + HEADERS,
                         ids=[f for f, _ in NUMBERS + HEADERS])
def test_operator_refuses_bad_numbers_and_headers(db_url: str, api: TestClient, world: World,
                                                  field: str, name: str) -> None:
    _refused(db_url, api, "POST", "/api/endpoints", f"{{{URL}, {field}}}", name)
    _refused(db_url, api, "PATCH", f"/api/endpoints/{world.a.endpoint}", f"{{{field}}}", name)
    assert api.get("/api/endpoints").status_code == 200


@pytest.fixture
def portal(app: FastAPI, web_settings: WebSettings) -> Iterator[TestClient]:
    with new_client(app) as client:
        client.headers["X-CSRF-Token"] = enter_portal(client, web_settings, "acme")
        yield client


@pytest.mark.parametrize(("field", "name"), HEADERS, ids=[f for f, _ in HEADERS])
def test_portal_refuses_bad_headers(db_url: str, portal: TestClient, world: World,
                                    field: str, name: str) -> None:
    _refused(db_url, portal, "POST", "/api/portal/endpoints", f"{{{URL}, {field}}}", name)
    _refused(db_url, portal, "PATCH", f"/api/portal/endpoints/{world.a.endpoint}",
             f"{{{field}}}", name)


def test_options_at_their_bounds_are_stored(db_url: str, api: TestClient,
                                            world: World) -> None:
    body = {"url": "http://127.0.0.1:9/new", "max_in_flight": 10_000, "max_attempts": 100,
            "retry_base_seconds": 86_400, "retry_cap_seconds": 2_592_000,
            "timeout_seconds": 3600, "headers": {"X-Team": "billing"}}
    created = api.post("/api/endpoints", json=body)
    assert created.status_code == 201, created.text
    endpoint = created.json()["endpoint"]
    assert {k: endpoint[k] for k in body} == body
    patched = api.patch(f"/api/endpoints/{endpoint['id']}", json={"max_in_flight": 2})
    assert patched.status_code == 200 and patched.json()["endpoint"]["max_in_flight"] == 2


def test_an_integer_written_with_a_point_zero_is_that_integer(api: TestClient) -> None:
    """JSON Schema counts 19.0 an integer, so a client generated from the document may send
    it: taken as 19 (1.5 and "5" stay refused: NUMBERS)."""
    body = (f'{{{URL}, "max_attempts": 19.0, "max_in_flight": 3.0, "rate_limit": 5,'
            ' "rate_burst": 20.0}')
    created = api.post("/api/endpoints", content=body.encode(),
                       headers={"Content-Type": "application/json"})
    assert created.status_code == 201, created.text
    endpoint = created.json()["endpoint"]
    assert (endpoint["max_attempts"], endpoint["max_in_flight"], endpoint["rate_burst"]) == (
        19, 3, 20)

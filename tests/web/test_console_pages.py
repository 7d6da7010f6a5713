"""The console and portal HTML pages through the ASGI client on a real database: each page
renders for its session, refuses without one, every form carries the CSRF token and every
POST refuses without it (nothing changed), bad input is a 4xx page, and no page shows a
secret except the once-only answer to adding an endpoint or rotating its secret."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import outbox
from outbox.admin.portal import WebSettings
from tests.support.cli import delivery_ids, execute, kill
from tests.support.pg import SCHEMA
from tests.support.workers import SECRET, add_endpoint
from tests.web.conftest import BASE, World, enter_portal, new_client

Client = tuple[TestClient, str]


class Forms(HTMLParser):
    """The POST forms of a page (action, hidden csrf_token) and every label/input pair."""

    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, str]] = []
        self.labels: set[str] = set()
        self.inputs: list[dict[str, str]] = []
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        for name in ("src", "href"):
            if re.match(r"^(https?:)?//", a.get(name, "")):
                self.external.append(a[name])
        if tag == "form" and a.get("method", "get").lower() == "post":
            self.forms.append({"action": a.get("action", ""), "csrf": ""})
        elif tag == "input" and a.get("name") == "csrf_token" and self.forms:
            self.forms[-1]["csrf"] = a.get("value", "")
        elif tag == "label" and "for" in a:
            self.labels.add(a["for"])
        if tag in ("input", "select", "textarea") and a.get("type") not in ("hidden", "submit"):
            self.inputs.append(a)


def parse(text: str) -> Forms:
    forms = Forms()
    forms.feed(text)
    return forms


def check_page(text: str, csrf: str) -> Forms:
    """What every page must hold: viewport, the local stylesheet, a heading, nothing from
    another site, a label for every input, the CSRF token in every POST form."""
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in text
    assert 'href="/static/outbox.css"' in text
    assert "<h1" in text
    page = parse(text)
    assert page.external == [], "nothing may be loaded from another site"
    for field in page.inputs:
        assert field.get("id") in page.labels or field.get("aria-label"), field
    for form in page.forms:
        assert form["csrf"] == csrf, form
    return page


def states_of(db_url: str, ids: list[int]) -> list[str]:
    rows = execute(db_url, f"SELECT DISTINCT state FROM {SCHEMA}.deliveries"
                           " WHERE id = ANY (%s)", (ids,))
    return [str(r[0]) for r in rows]


def is_enabled(db_url: str, endpoint: object) -> bool:
    (row,) = execute(db_url, f"SELECT enabled FROM {SCHEMA}.endpoints WHERE id = %s",
                     (endpoint,))
    return bool(row[0])


def console_paths(world: World) -> list[str]:
    dead = world.a.dead[0]
    return ["/", "/endpoints", "/endpoints?enabled=false&tenant=acme", "/dead",
            f"/dead?endpoint={world.a.endpoint}", "/dead?tenant=acme&event_type=invoice.paid",
            f"/dead/replay?ids={dead}", "/dead/replay?tenant=acme", "/events",
            "/events?tenant=globex", f"/events/{world.a.events[0]}", f"/deliveries/{dead}"]


def test_every_console_page_renders_for_the_operator(operator: Client, world: World) -> None:
    client, csrf = operator
    for path in console_paths(world):
        answer = client.get(path)
        assert answer.status_code == 200, (path, answer.text)
        assert answer.headers["content-type"].startswith("text/html")
        check_page(answer.text, csrf)
        assert SECRET not in answer.text and "whsec_" not in answer.text


def test_overview_shows_the_figures_and_two_inline_charts(operator: Client, world: World
                                                          ) -> None:
    client, _ = operator
    text = client.get("/").text
    for shape in ("wide", "narrow"):
        svg = rf'<svg class="{shape}" viewBox="0 0 [0-9.]+ [0-9.]+" role="img"'
        assert len(re.findall(svg, text)) == 2
    assert "Delivery rate per minute" in text and "Backlog (pending deliveries)" in text
    dead_total = len(world.a.dead + world.a.shared_dead + world.b.dead + world.b.shared_dead)
    assert re.search(rf'Dead letters</p><p class="value"><a href="/dead">{dead_total}</a>', text)
    assert "<script" not in text


def test_stylesheet_is_served_locally(anon: TestClient) -> None:
    css = anon.get("/static/outbox.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert "@media (max-width: 640px)" in css.text and "http" not in css.text


def test_pages_without_a_session_redirect_to_login(anon: TestClient, world: World,
    db_url: str) -> None:
    for path in console_paths(world):
        answer = anon.get(path)
        assert answer.status_code == 303, path
        assert answer.headers["location"].startswith("/login?next=%2F"), path
    for path in ("/dead/replay", f"/endpoints/{world.a.endpoint}/disable"):
        assert anon.post(path, data={"ids": str(world.a.dead[0])}).status_code == 303
    assert states_of(db_url, world.a.dead) == ["dead"]
    assert is_enabled(db_url, world.a.endpoint)


def test_login_then_comes_back_to_the_page_asked_for(app: FastAPI, world: World) -> None:
    from tests.web.conftest import TOKEN

    with new_client(app) as client:
        target = client.get("/dead").headers["location"]
        form = client.get(target)
        nonce = form.text.split('name="csrf_token" value="')[1].split('"')[0]
        done = client.post("/login", data={"token": TOKEN, "csrf_token": nonce,
                                           "next": form.text.split('name="next" value="')[1]
                                           .split('"')[0]})
        assert done.headers["location"] == "/dead"
        assert client.get("/dead").status_code == 200




def test_console_posts_without_csrf_are_refused_and_change_nothing(
        operator: Client, world: World, db_url: str) -> None:
    client, csrf = operator
    dead = str(world.a.dead[0])
    for token in ("", "wrong", csrf[:-1]):
        assert client.post("/dead/replay", data={"ids": dead, "csrf_token": token}
                           ).status_code == 403
        assert client.post(f"/endpoints/{world.a.endpoint}/disable",
                           data={"csrf_token": token}).status_code == 403
    assert states_of(db_url, world.a.dead[:1]) == ["dead"]
    assert is_enabled(db_url, world.a.endpoint)


def test_replay_shows_the_dry_run_then_replays(operator: Client, world: World, db_url: str) -> None:
    client, csrf = operator
    confirm = client.get(f"/dead/replay?endpoint={world.a.endpoint}")
    assert "The dry run found <strong>2</strong> dead deliveries" in confirm.text
    assert "http://127.0.0.1:9/acme" in confirm.text
    assert states_of(db_url, world.a.dead) == ["dead"]  # the dry run changes nothing
    hidden = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">',
                             confirm.text))
    assert hidden == {"csrf_token": csrf, "endpoint": str(world.a.endpoint)}
    done = client.post("/dead/replay", data=hidden)
    assert done.status_code == 303 and done.headers["location"] == "/dead?done=replayed"
    assert states_of(db_url, world.a.dead) == ["pending"]
    assert states_of(db_url, world.b.dead) == ["dead"]
    assert "Replayed" in client.get(done.headers["location"]).text


def test_replay_of_one_delivery_goes_to_its_page(operator: Client, world: World) -> None:
    client, csrf = operator
    dead = world.b.dead[1]
    done = client.post("/dead/replay", data={"ids": str(dead), "csrf_token": csrf})
    assert done.headers["location"] == f"/deliveries/{dead}?done=replayed"
    page = client.get(done.headers["location"]).text
    assert '<span class="badge warn">pending</span>' in page
    assert "Replay: replayed" in page  # the audit entry in the attempt timeline


def test_replay_onto_a_disabled_endpoint_needs_the_checkbox(operator: Client,
                                                            world: World, db_url: str) -> None:
    client, csrf = operator
    client.post(f"/endpoints/{world.a.endpoint}/disable", data={"csrf_token": csrf})
    assert not is_enabled(db_url, world.a.endpoint)
    confirm = client.get(f"/dead/replay?endpoint={world.a.endpoint}").text
    assert "disabled" in confirm and 'name="enable_endpoints"' in confirm
    refused = client.post("/dead/replay", data={"endpoint": str(world.a.endpoint),
                                                "csrf_token": csrf})
    assert refused.status_code == 409 and "disabled endpoint" in refused.text
    assert states_of(db_url, world.a.dead) == ["dead"]
    client.post("/dead/replay", data={"endpoint": str(world.a.endpoint), "csrf_token": csrf,
                                      "enable_endpoints": "1"})
    assert states_of(db_url, world.a.dead) == ["pending"] and is_enabled(db_url, world.a.endpoint)


def test_dead_letters_page_through_every_row_once(operator: Client, db_url: str) -> None:
    """250 rows dead in one batch (one finished_at): "Older" links reach each exactly once."""
    client, _ = operator
    endpoint = add_endpoint(db_url, BASE + "many", tenant="acme")
    with psycopg.connect(db_url) as c:
        outbox.emit_many(c, [outbox.Event("invoice.paid", {"n": i}, tenant="acme")
                             for i in range(250)])
        c.commit()
    dead = delivery_ids(db_url, "endpoint_id = %s", (endpoint,))
    kill(db_url, dead)  # one UPDATE: every row gets the same finished_at
    seen: list[int] = []
    path: str | None = f"/dead?endpoint={endpoint}"
    while path is not None:
        page = client.get(path)
        assert page.status_code == 200, page.text
        seen += [int(i) for i in re.findall(r'href="/deliveries/(\d+)"', page.text)]
        older = re.search(r'href="(/dead\?[^"]*)" rel="next"', page.text)
        path = older.group(1).replace("&amp;", "&") if older else None
    assert sorted(seen) == sorted(dead) and len(seen) == len(set(seen)) == 250
    assert client.get(f"/dead?endpoint={endpoint}&cursor=zzz").status_code == 400


@pytest.mark.parametrize(("path", "status"), [
    ("/deliveries/abc", 404), ("/deliveries/999999", 404), ("/deliveries/-1", 404),
    ("/events/not-a-uuid", 404), ("/events/01890a5d-ac96-774b-bcce-b302099a8057", 404),
    ("/dead?endpoint=zzz", 400), ("/dead?tenant=" + "x" * 300, 400),
    ("/dead/replay?ids=1,abc", 404), ("/dead/replay?ids=999999", 404),
    ("/events?before=zzz", 404), ("/endpoints?tenant=" + "x" * 300, 400),
])
def test_bad_input_is_a_4xx_page(operator: Client, world: World, path: str,
                                 status: int) -> None:
    client, _ = operator
    answer = client.get(path)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("text/html")


def test_bad_replay_posts_change_nothing(operator: Client, world: World, db_url: str) -> None:
    client, csrf = operator
    before = execute(db_url, f"SELECT id, state FROM {SCHEMA}.deliveries ORDER BY id")
    for data in ({"ids": "1,abc"}, {"ids": "999999"}, {"endpoint": "zzz"},
                 {"tenant": "x" * 300}):
        answer = client.post("/dead/replay", data={**data, "csrf_token": csrf})
        assert 400 <= answer.status_code < 500, (data, answer.text)
    assert client.post("/endpoints/zzz/disable", data={"csrf_token": csrf}).status_code == 404
    assert client.post(f"/endpoints/{world.a.endpoint}/explode",
                       data={"csrf_token": csrf}).status_code == 404
    assert execute(db_url, f"SELECT id, state FROM {SCHEMA}.deliveries ORDER BY id") == before


# --- the portal ---------------------------------------------------------------------------


@pytest.fixture
def portal(app: FastAPI, web_settings: WebSettings, world: World) -> Client:
    client = new_client(app)
    return client, enter_portal(client, web_settings, "acme")


def portal_paths(world: World) -> list[str]:
    return ["/portal/", "/portal", "/portal/log", f"/portal/endpoints/{world.a.endpoint}",
            f"/portal/events/{world.a.events[0]}", f"/portal/replay?ids={world.a.dead[0]}",
            f"/portal/replay?endpoint={world.a.endpoint}"]


def test_every_portal_page_renders_for_its_tenant(portal: Client, world: World) -> None:
    client, csrf = portal
    for path in portal_paths(world):
        answer = client.get(path)
        assert answer.status_code == 200, (path, answer.text)
        check_page(answer.text, csrf)
        assert "whsec_" not in answer.text
        assert "globex" not in answer.text and "all-tenants" not in answer.text


def test_portal_pages_without_a_session_go_to_the_expired_page(anon: TestClient,
                                                               world: World, db_url: str) -> None:
    for path in portal_paths(world):
        answer = anon.get(path)
        assert answer.status_code == 303 and answer.headers["location"] == "/portal/expired"
    assert anon.post("/portal/endpoints", data={"url": "http://127.0.0.1:9/x"}
                     ).status_code == 303
    expired = anon.get("/portal/expired")
    assert expired.status_code == 401 and "portal link" in expired.text
    assert len(execute(db_url, f"SELECT id FROM {SCHEMA}.endpoints")) == 3


def test_operator_session_is_not_a_portal_session(operator: Client, world: World) -> None:
    client, _ = operator
    assert client.get("/portal/").headers["location"] == "/portal/expired"


def test_portal_adds_an_endpoint_and_shows_its_secret_once(portal: Client, db_url: str) -> None:
    client, csrf = portal
    added = client.post("/portal/endpoints", data={
        "csrf_token": csrf, "url": "http://127.0.0.1:9/new", "description": "billing",
        "event_types": "invoice.*, order.created"})
    assert added.status_code == 200 and added.headers["cache-control"] == "no-store"
    (secret,) = re.findall(r"whsec_[A-Za-z0-9+/=]+", added.text)
    rows = execute(db_url, f"SELECT tenant, event_types, description FROM {SCHEMA}"
                               ".endpoints WHERE url = 'http://127.0.0.1:9/new'")
    assert rows == [("acme", ["invoice.*", "order.created"], "billing")]
    home = client.get("/portal/").text
    assert "http://127.0.0.1:9/new" in home and secret not in home and "whsec_" not in home


@pytest.mark.parametrize("data", [
    {"url": "ftp://example.com/x"}, {"url": ""}, {"url": "http://10.0.0.1/x"},
    {"url": "http://127.0.0.1:9/x", "event_types": "bad type!"},
])
def test_portal_refuses_bad_endpoints_and_writes_nothing(portal: Client,
                                                         data: dict[str, str], db_url: str) -> None:
    client, csrf = portal
    answer = client.post("/portal/endpoints", data={**data, "csrf_token": csrf})
    assert answer.status_code == 400 and 'role="alert"' in answer.text
    assert "whsec_" not in answer.text
    assert len(execute(db_url, f"SELECT id FROM {SCHEMA}.endpoints")) == 3


def test_portal_edits_disables_and_rotates_its_endpoint(portal: Client, world: World,
    db_url: str) -> None:
    client, csrf = portal
    base = f"/portal/endpoints/{world.a.endpoint}"
    saved = client.post(base, data={"csrf_token": csrf, "url": "http://127.0.0.1:9/acme2",
                                    "description": "moved", "event_types": ""})
    assert saved.status_code == 303
    assert execute(db_url, f"SELECT url, description, event_types FROM {SCHEMA}.endpoints"
                               " WHERE id = %s", (world.a.endpoint,)) == [
        ("http://127.0.0.1:9/acme2", "moved", None)]
    assert client.post(base + "/disable", data={"csrf_token": csrf}).status_code == 303
    assert not is_enabled(db_url, world.a.endpoint)
    rotated = client.post(base + "/rotate", data={"csrf_token": csrf, "grace": "24"})
    assert rotated.status_code == 200 and rotated.headers["cache-control"] == "no-store"
    (secret,) = re.findall(r"whsec_[A-Za-z0-9+/=]+", rotated.text)
    assert secret != SECRET and SECRET not in rotated.text
    again = client.post(base + "/rotate", data={"csrf_token": csrf, "grace": "24"})
    assert again.status_code == 409 and "whsec_" not in again.text
    assert secret not in client.get(base).text


def test_portal_posts_without_csrf_change_nothing(portal: Client, world: World,
    db_url: str) -> None:
    client, _ = portal
    base = f"/portal/endpoints/{world.a.endpoint}"
    for path, data in ((base, {"url": "http://127.0.0.1:9/evil"}), (base + "/disable", {}),
                       (base + "/rotate", {}), ("/portal/endpoints", {"url": "http://x.io"}),
                       ("/portal/replay", {"ids": str(world.a.dead[0])})):
        assert client.post(path, data=data).status_code == 403, path
    assert is_enabled(db_url, world.a.endpoint)
    assert states_of(db_url, world.a.dead) == ["dead"]
    assert len(execute(db_url, f"SELECT id FROM {SCHEMA}.endpoints")) == 3


def test_portal_never_reaches_another_tenant(portal: Client, world: World, db_url: str) -> None:
    client, csrf = portal
    theirs = [f"/portal/endpoints/{world.b.endpoint}", f"/portal/endpoints/{world.everyone}",
              f"/portal/events/{world.b.events[0]}", f"/portal/replay?ids={world.b.dead[0]}",
              f"/portal/replay?ids={world.a.shared_dead[0]}",
              f"/portal/replay?endpoint={world.b.endpoint}",
              f"/portal/replay?endpoint={world.everyone}"]
    for path in theirs:
        assert client.get(path).status_code == 404, path
    for endpoint in (world.b.endpoint, world.everyone):
        for action in ("", "/disable", "/rotate"):
            answer = client.post(f"/portal/endpoints/{endpoint}{action}",
                                 data={"csrf_token": csrf, "url": "http://127.0.0.1:9/x"})
            assert answer.status_code == 404, (endpoint, action)
        assert is_enabled(db_url, endpoint)
    for data in ({"ids": str(world.b.dead[0])}, {"ids": str(world.a.shared_dead[0])},
                 {"endpoint": str(world.b.endpoint)}, {"endpoint": str(world.everyone)},
                 {"tenant": "globex"}):
        assert client.post("/portal/replay", data={**data, "csrf_token": csrf}
                           ).status_code in (400, 404)
    assert states_of(db_url, world.b.dead + world.a.shared_dead + world.b.shared_dead) == ["dead"]
    log = client.get("/portal/log").text
    assert all(str(e) not in log for e in world.b.events)


def test_portal_replays_its_failed_deliveries(portal: Client, world: World, db_url: str) -> None:
    client, csrf = portal
    log = client.get("/portal/log").text
    assert f"/portal/replay?endpoint={world.a.endpoint}" in log
    confirm = client.get(f"/portal/replay?endpoint={world.a.endpoint}").text
    assert "The dry run found <strong>2</strong> dead deliveries" in confirm
    done = client.post("/portal/replay", data={"endpoint": str(world.a.endpoint),
                                               "csrf_token": csrf})
    assert done.status_code == 303 and done.headers["location"] == "/portal/log?done=replayed"
    assert states_of(db_url, world.a.dead) == ["pending"]
    assert states_of(db_url, world.a.shared_dead) == ["dead"]  # the internal endpoint's rows


def test_no_page_shows_a_stored_secret(operator: Client, portal: Client, world: World,
    db_url: str) -> None:
    sealed = [str(r[0]) for r in execute(db_url, f"SELECT secret FROM {SCHEMA}.endpoints")]
    pages = [operator[0].get(p).text for p in console_paths(world)]
    pages += [portal[0].get(p).text for p in portal_paths(world)]
    for text in pages:
        assert SECRET not in text and "whsec_" not in text
        assert not any(s in text for s in sealed)
    assert delivery_ids(db_url)  # the pages above had data to show

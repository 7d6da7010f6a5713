"""The console and the portal in a real browser: headless Chromium (Debian's packages,
through Selenium and the system chromedriver) against a live ``outbox serve``, a real
``outbox worker`` process and a real HTTP receiver on 127.0.0.1.

Screenshots of the main pages go to tests/web/screenshots/ (git-ignored) for a reviewer.
A missing browser fails these tests (tests/support/browser.py), it never skips them.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

import outbox
from outbox.admin import types
from outbox.testing.receiver import Behaviour, Receiver
from tests.support import pg
from tests.support.browser import Server, chromium, screenshot
from tests.support.cli import delivery_ids, execute
from tests.support.pg import SCHEMA
from tests.support.workers import SECRET, add_endpoint, spawn, wait_until

pytestmark = pytest.mark.slow  # a browser, a server and a worker process

TOKEN = "browser-test-admin-token-0123456789"
FAST = {"OUTBOX_POLL_INTERVAL_SECONDS": "0.1", "OUTBOX_RETRY_BASE_SECONDS": "0.1",
        "OUTBOX_RETRY_CAP_SECONDS": "0.5", "OUTBOX_WAKEUP": "poll"}
PHONE = (390, 844)  # CSS pixels of a common phone


@dataclass
class Live:
    db_url: str
    server: Server
    receiver: Receiver
    endpoint: uuid.UUID
    event: uuid.UUID
    dead: int


@pytest.fixture(scope="module")
def live(server_url: str, template_db: str) -> Iterator[Live]:
    """A database with one dead letter (the receiver answered 400, then recovers), a
    worker delivering, and ``outbox serve`` over it."""
    db_url = pg.create_database(server_url, template=template_db)
    receiver = Receiver(secret=SECRET)
    receiver.script("/acme", [Behaviour(status=400, body=b'{"error":"schema mismatch"}'),
                              Behaviour(status=200)])
    worker = spawn(db_url, **FAST)
    server = None
    try:
        endpoint = add_endpoint(db_url, receiver.url + "/acme", tenant="acme",
                                description="ACME billing")
        with psycopg.connect(db_url, autocommit=True) as conn:
            types.add(conn, "invoice.paid", schema=SCHEMA, description="An invoice was paid",
                      json_schema={"type": "object", "required": ["invoice"],
                                   "properties": {"invoice": {"type": "integer"}}},
                      example={"invoice": 7})
        with psycopg.connect(db_url) as conn:
            event = outbox.emit(conn, outbox.Event("invoice.paid", {"invoice": 42},
                                                   tenant="acme"))
            conn.commit()
        (dead,) = delivery_ids(db_url)
        wait_until(lambda: state(db_url, dead) == "dead", 30, "the first attempt to die")
        server = Server(db_url, TOKEN, OUTBOX_ALLOW_NETWORKS="127.0.0.0/8",
                        OUTBOX_PORTAL_ALLOW_NETWORKS="127.0.0.0/8")
        yield Live(db_url, server, receiver, endpoint, event, dead)
    finally:
        if server is not None:
            server.stop()
        worker.kill()
        worker.wait(timeout=30)
        receiver.stop()
        pg.drop_database(server_url, db_url)


def state(db_url: str, delivery: int) -> str:
    (row,) = execute(db_url, f"SELECT state FROM {SCHEMA}.deliveries WHERE id = %s",
                     (delivery,))
    return str(row[0])


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium() as session:
        yield session


def sign_in(browser: WebDriver, live: Live, path: str) -> None:
    browser.get(live.server.url + path)
    assert "/login" in browser.current_url, "an anonymous visit must land on the login form"
    screenshot(browser, "login")
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait_until(lambda: "/login" not in browser.current_url, 10, "the sign-in")


def test_operator_replays_a_dead_letter_and_sees_it_delivered(browser: WebDriver,
                                                              live: Live) -> None:
    sign_in(browser, live, "/dead")
    assert browser.current_url == live.server.url + "/dead"
    row = browser.find_element(By.XPATH, f"//tr[.//a[text()='#{live.dead}']]")
    assert "invoice.paid" in row.text and "HTTP 400" in row.text
    screenshot(browser, "dead-letters")

    row.find_element(By.LINK_TEXT, "Replay…").click()
    body = browser.find_element(By.TAG_NAME, "main").text
    assert "The dry run found 1 dead delivery" in body
    assert live.receiver.url + "/acme" in body
    assert state(live.db_url, live.dead) == "dead"  # the confirmation page changes nothing
    screenshot(browser, "replay-confirm")

    browser.find_element(By.XPATH, "//button[text()='Replay 1 delivery']").click()
    wait_until(lambda: browser.current_url.endswith(f"/deliveries/{live.dead}?done=replayed"),
               10, "the replay's redirect")  # click() does not wait for the navigation

    def delivered() -> bool:
        browser.refresh()
        return bool(browser.find_elements(By.CSS_SELECTOR, "h1 .badge.ok"))

    wait_until(delivered, 30, "the replayed delivery to show as delivered")
    browser.find_element(By.CSS_SELECTOR, "ol.timeline details summary").click()
    timeline = browser.find_element(By.CSS_SELECTOR, "ol.timeline").text
    assert "Attempt 1: dead" in timeline and "Replay: replayed" in timeline
    assert "Attempt 1: delivered" in timeline and "schema mismatch" in timeline
    screenshot(browser, "delivery-timeline")
    ids = {r.webhook_id for r in live.receiver.received}
    assert ids == {str(live.event)}, "the replay is the same event (same webhook-id)"
    assert len(live.receiver.received) == 2


def test_console_pages_render(browser: WebDriver, live: Live) -> None:
    browser.get(live.server.url + "/")
    if "/login" in browser.current_url:
        sign_in(browser, live, "/")
    for path, name, heading in (("/", "overview", "Overview"),
                                ("/endpoints", "endpoints", "Endpoints"),
                                ("/events", "events", "Events"),
                                (f"/events/{live.event}", "event", "Event invoice.paid"),
                                ("/types", "types", "Event types"),
                                ("/types/invoice.paid", "event-type", "invoice.paid")):
        browser.get(live.server.url + path)
        assert browser.find_element(By.TAG_NAME, "h1").text == heading
        assert not browser.find_elements(By.TAG_NAME, "script")
        screenshot(browser, name)
    browser.get(live.server.url + "/endpoints")
    assert "ACME billing" in browser.find_element(By.TAG_NAME, "main").text
    browser.get(live.server.url + "/")
    charts = [c for c in browser.find_elements(By.CSS_SELECTOR, "figure.chart svg[role=img]")
              if c.is_displayed()]
    assert len(charts) == 2 and all(c.size["height"] > 150 for c in charts)


def portal_link(live: Live) -> str:
    """A link minted by the CLI, as a SaaS backend would."""
    done = subprocess.run(
        [sys.executable, "-m", "outbox", "portal-link", "--tenant", "acme", "--expires", "10m",
         "--base-url", live.server.url, "--json"],
        env=live.server.env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    url: str = json.loads(done.stdout)["url"]
    return url


def test_customer_opens_a_portal_link_and_adds_an_endpoint(live: Live) -> None:
    with chromium() as browser:  # a browser of its own: no operator session in it
        browser.get(portal_link(live))
        assert browser.current_url.rstrip("/") == live.server.url + "/portal"
        assert "ACME billing" in browser.find_element(By.TAG_NAME, "main").text
        screenshot(browser, "portal-endpoints")

        browser.find_element(By.ID, "add-url").send_keys(live.receiver.url + "/acme-new")
        browser.find_element(By.ID, "add-description").send_keys("New receiver")
        browser.find_element(By.ID, "add-types").send_keys("invoice.*")
        browser.find_element(By.XPATH, "//button[text()='Add endpoint']").click()
        # the POST's answer is a new page: wait for it (a click need not wait for the load)
        secret = WebDriverWait(browser, 15).until(
            expected_conditions.presence_of_element_located((By.ID, "secret"))).text
        assert secret.startswith("whsec_")
        screenshot(browser, "portal-secret")

        browser.find_element(By.LINK_TEXT, "Done").click()
        main = browser.find_element(By.TAG_NAME, "main").text
        assert live.receiver.url + "/acme-new" in main and secret not in main
        rows = execute(live.db_url, f"SELECT tenant, event_types FROM {SCHEMA}.endpoints"
                                    " WHERE url = %s", (live.receiver.url + "/acme-new",))
        assert rows == [("acme", ["invoice.*"])]

        browser.get(live.server.url + "/portal/log")
        assert str(live.event) in browser.find_element(By.TAG_NAME, "main").text
        screenshot(browser, "portal-log")

        browser.find_element(By.LINK_TEXT, "Event catalog").click()
        assert browser.find_element(By.TAG_NAME, "h1").text == "Event catalog"
        browser.find_element(By.LINK_TEXT, "invoice.paid").click()
        main = browser.find_element(By.TAG_NAME, "main").text
        assert "An invoice was paid" in main and '"invoice": 7' in main
        assert '"required"' in browser.find_element(
            By.CSS_SELECTOR, "pre[aria-label='JSON Schema']").text
        screenshot(browser, "portal-catalog")
        browser.get(live.server.url + "/")
        assert "/login" in browser.current_url, "a portal session is not an operator's"


def overflow(browser: WebDriver) -> int:
    """How many CSS pixels the page, or a table inside its scrolling wrapper, is wider than
    the room it has (0: nothing to scroll sideways)."""
    width = browser.execute_script("""
        const page = Math.max(document.documentElement.scrollWidth,
                              document.body.scrollWidth) - window.innerWidth;
        const boxes = [...document.querySelectorAll('.table-wrap, pre, dl, form')]
            .map(e => e.scrollWidth - e.clientWidth);
        return Math.max(page, ...boxes);""")
    return int(width)


def test_phone_sized_viewport_has_no_horizontal_overflow(live: Live) -> None:
    with chromium(*PHONE, phone=True) as phone:
        phone.get(live.server.url + "/login")
        phone.find_element(By.ID, "token").send_keys(TOKEN)
        phone.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
        wait_until(lambda: "/login" not in phone.current_url, 10, "the sign-in")
        assert phone.execute_script("return window.innerWidth") == PHONE[0]
        for path in ("/", "/endpoints", "/dead", "/events", f"/events/{live.event}",
                     f"/deliveries/{live.dead}", f"/dead/replay?ids={live.dead}", "/types",
                     "/types/invoice.paid"):
            phone.get(live.server.url + path)
            assert overflow(phone) <= 0, f"{path} scrolls sideways on a phone"
        phone.get(live.server.url + "/")
        charts = [c for c in phone.find_elements(By.CSS_SELECTOR, "figure.chart svg")
                  if c.is_displayed()]
        assert [c.get_attribute("class") for c in charts] == ["narrow", "narrow"]
        assert all(c.size["height"] > 150 for c in charts)
        screenshot(phone, "phone-overview")
        phone.get(portal_link(live))
        for path in ("/portal/", "/portal/log", f"/portal/endpoints/{live.endpoint}",
                     "/portal/catalog", "/portal/catalog/invoice.paid"):
            phone.get(live.server.url + path)
            assert overflow(phone) <= 0, f"{path} scrolls sideways on a phone"
        phone.get(live.server.url + "/portal/")
        screenshot(phone, "phone-portal")

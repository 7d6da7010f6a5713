"""Real-browser plumbing: headless Chromium (Debian's ``chromium`` and ``chromium-driver``)
driven by Selenium through the system chromedriver, and a live ``outbox serve`` process.

No download ever happens: the driver is /usr/bin/chromedriver (never selenium-manager),
and a missing browser FAILS the test with the command that installs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.webdriver import WebDriver

from tests.support.net import free_port
from tests.support.pg import SCHEMA

CHROMIUM = os.environ.get("OUTBOX_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("OUTBOX_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
SCREENSHOTS = Path(os.environ.get("OUTBOX_SCREENSHOTS",
                                  Path(__file__).resolve().parents[1] / "web" / "screenshots"))
INSTALL_HINT = ("install them: apt-get install -y chromium chromium-driver "
                "(`python3 deploy/dev.py test` does it on a fresh machine)")


def browser_paths() -> tuple[str, str]:
    """The chromium and chromedriver executables, or a test failure naming the fix."""
    found = [shutil.which(p) for p in (CHROMIUM, CHROMEDRIVER)]
    if not all(found):
        pytest.fail(f"chromium and chromedriver are needed at {CHROMIUM} and {CHROMEDRIVER}:"
                    f" {INSTALL_HINT}")
    return str(found[0]), str(found[1])


@contextmanager
def chromium(width: int = 1280, height: int = 900, *, phone: bool = False
             ) -> Iterator[WebDriver]:
    """A headless Chromium session (its own throwaway profile); ``phone``: Chromium's
    mobile emulation at ``width`` x ``height`` CSS pixels (touch, device pixel ratio 3),
    since a desktop window cannot be narrower than 500 pixels."""
    binary, driver = browser_paths()
    options = Options()
    options.binary_location = binary
    if phone:
        options.add_experimental_option("mobileEmulation", {
            "deviceMetrics": {"width": width, "height": height, "pixelRatio": 3.0,
                              "touch": True}})
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--no-first-run", "--disable-extensions", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                f"--window-size={width},{height}"):
        options.add_argument(arg)
    os.environ["SE_OFFLINE"] = "true"  # selenium-manager must not try the network
    with tempfile.TemporaryDirectory(prefix="outbox-chromium-") as profile:
        options.add_argument(f"--user-data-dir={profile}")
        session = webdriver.Chrome(options=options, service=Service(executable_path=driver))
        try:
            session.set_page_load_timeout(30)
            yield session
        finally:
            session.quit()


def screenshot(session: WebDriver, name: str) -> Path:
    """Save the current page as ``SCREENSHOTS/name.png`` (git-ignored) and return it."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    assert session.save_screenshot(str(path)), f"screenshot {name} failed"
    return path


class Server:
    """A live ``outbox serve`` on 127.0.0.1 (a subprocess: the real entry point)."""

    def __init__(self, db_url: str, token: str, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "OUTBOX_DATABASE_URL": db_url, "OUTBOX_SCHEMA": SCHEMA,
                    "OUTBOX_ADMIN_TOKEN": token, **env}
        self.log: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (as long as the server)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "outbox", "serve", "--host", "127.0.0.1",
             "--port", str(self.port), "--log-level", "warning"],
            env=self.env, stdout=subprocess.DEVNULL, stderr=self.log)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"outbox serve exited: {self.output()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"outbox serve not ready after {timeout}s: {self.output()}")

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)
        self.log.close()

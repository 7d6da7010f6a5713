"""docs/guides/destinations.md: each broker's snippets work when pasted. The consumer runs
as written (with this test's own exchange/queue/stream/subject names), the registration
runs in a shell, then a worker delivers two events and the consumer prints each once."""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support import brokers as b
from tests.support.pg import SCHEMA
from tests.support.workers import SECRET, drain, emit, rows, settings

pytestmark = pytest.mark.slow  # consumers and a shell per broker

ROOT = Path(__file__).resolve().parents[2]


def _section(title: str) -> tuple[str, str]:
    text = (ROOT / "docs" / "guides" / "destinations.md").read_text()
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    sh = re.search(r"```sh\n(.*?)\n```", section, re.S)
    py = re.search(r"```python\n(.*?)\n```", section, re.S)
    assert sh and py, f"{title}: a sh block and a python block"
    return sh.group(1), py.group(1)


def _names(title: str) -> dict[str, str]:
    """This test's own names in place of the page's."""
    if title == "RabbitMQ":
        ex = b.unique("orders")
        return {'"orders-billing"': f'"{b.unique("billing")}"', '"orders"': f'"{ex}"',
                "exchange=orders'": f"exchange={ex}'"}
    if title == "NATS JetStream":
        subject = b.unique("orders").replace("-", "_") + ".events"
        return {'"ORDERS"': f'"{b.unique("S")}"', "orders.events": subject}
    stream = b.unique("orders")
    return {'"orders"': f'"{stream}"', "stream=orders&": f"stream={stream}&"}


def _clean(title: str, names: dict[str, str]) -> None:
    """Delete what the snippets declared (durable: it would outlive the test)."""
    quoted = [v.strip('"') for k, v in names.items() if k.startswith('"')]
    if title == "RabbitMQ":
        b.run(b.amqp_drain(quoted[0]))
        b.run(b.amqp_delete_exchange(quoted[1]))
    elif title == "NATS JetStream":
        b.run(b.nats_drain(quoted[0]))
    else:
        b.run(b.redis_drain(quoted[0]))


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    out: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return out


def _until(lines: queue.Queue[str], done: set[str], timeout: float) -> list[str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while not done <= set(seen) and time.monotonic() < deadline:
        try:
            seen.append(lines.get(timeout=0.2))
        except queue.Empty:
            continue
    return seen


@pytest.mark.parametrize("title", ["RabbitMQ", "NATS JetStream", "Redis Streams"])
def test_register_and_consume_snippets(db_url: str, tmp_path: Path, title: str) -> None:
    b.require()
    sh, py = _section(title)
    names = _names(title)
    for old, new in names.items():
        assert old in sh + py, f"{title}: the page no longer says {old}"
        sh, py = sh.replace(old, new), py.replace(old, new)
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "OUTBOX_DATABASE_URL": db_url, "WEBHOOK_SECRET": SECRET,
           "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    consumer = subprocess.Popen([sys.executable, "-c", py], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        lines = _lines(consumer)
        assert "ready" in _until(lines, {"ready"}, 30), consumer.stderr
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", sh], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "guest:guest" not in done.stdout
        ids = emit(db_url, 2, "order.paid")
        drain(settings(db_url))
        wanted = {f"event {i} order.paid" for i in ids}
        got = _until(lines, wanted, 30)
        assert wanted <= set(got), (got, consumer.poll())
        assert len(got) == len(set(got))
    finally:
        consumer.kill()
        consumer.wait(10)
        _clean(title, names)


def test_the_readme_registers_each_broker(db_url: str, tmp_path: Path) -> None:
    """README "Destinations": its registration block, run as written (with this test's
    own exchange, subject and stream), delivers each event once to each broker with the
    event id as the message id and the exact payload bytes."""
    b.require()
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Destinations\n", 1)[1].split("\n## ", 1)[0]
    sh = re.search(r"```sh\n(.*?)\n```", section, re.S)
    assert sh, "README Destinations: a sh block"
    exchange, queue, stream = b.unique("orders"), b.unique("q"), b.unique("S")
    subject, rstream = b.unique("orders").replace("-", "_") + ".events", b.unique("orders")
    script = sh.group(1)
    for old, new in {"exchange=orders'": f"exchange={exchange}'",
                     "subject=orders.events'": f"subject={subject}'",
                     "stream=orders&": f"stream={rstream}&"}.items():
        assert old in script, f"README Destinations no longer says {old}"
        script = script.replace(old, new)
    b.run(b.amqp_queue(exchange, queue, "order.*"))
    b.run(b.nats_stream(stream, [subject]))
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "OUTBOX_DATABASE_URL": db_url, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    try:
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=env,
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "guest:guest" not in done.stdout
        ids = {str(i) for i in emit(db_url, 2, "order.paid")}
        drain(settings(db_url))
        got = [b.run(b.amqp_drain(queue)), b.run(b.nats_drain(stream, delete=False)),
               b.run(b.redis_drain(rstream))]
    finally:
        b.run(b.nats_drain(stream))
        b.run(b.amqp_delete_exchange(exchange))
    sent = {str(i): p.encode() for i, p in rows(db_url, f"SELECT id, payload::text"
                                                        f" FROM {SCHEMA}.events")}
    for messages in got:
        assert sorted(m.id for m in messages) == sorted(ids)  # once each, id = event id
        assert all(m.body == sent[m.id] for m in messages)

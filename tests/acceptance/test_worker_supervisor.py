"""``outbox worker --processes N`` (a supervisor and its children) and plain workers side by
side on one host: real processes, a real PostgreSQL, a real receiver."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import psycopg
import pytest

from outbox.delivery.settings import WorkerSettings
from outbox.testing.receiver import Behaviour, Receiver
from tests.support import workers
from tests.support.net import free_port
from tests.support.pg import SCHEMA
from tests.support.workers import _LOGS as LOGS
from tests.support.workers import (
    SECRET,
    add_endpoint,
    emit,
    log_of,
    rows,
    spawn,
    states,
    wait_until,
)

FAST = {**workers.FAST, "OUTBOX_METRICS_HOST": "127.0.0.1"}
LEASED = ("SELECT count(*) FROM outbox.deliveries"
          " WHERE state = 'pending' AND lease_token IS NOT NULL")


@contextmanager
def killing(proc: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """``proc``, killed with its children if still running at the end."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            for pid in children_of(proc.pid):  # never leave a child behind
                os.kill(pid, signal.SIGKILL)
            proc.kill()
        proc.wait(30)


def running(db_url: str, *args: str, **env: str
            ) -> AbstractContextManager[subprocess.Popen[bytes]]:
    """An ``outbox worker`` process (tests.support.workers.spawn), killed at the end."""
    return killing(spawn(db_url, *args, **{**FAST, **env}))


def children_of(pid: int) -> list[int]:
    """The live child processes of ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")) and all(
                f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def stop(proc: subprocess.Popen[bytes], timeout: float = 60) -> str:
    """SIGTERM, wait; the exit status must be 0; the log."""
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout)
    assert proc.returncode == 0, log_of(proc)[-3000:]
    return log_of(proc)


def totals(log: str) -> dict[str, int]:
    """The counters ``outbox worker`` printed last."""
    line = [ln for ln in log.splitlines() if ln.startswith("claimed=")][-1]
    return {k: int(v) for k, v in (item.split("=") for item in line.split())}


def wait_children(pid: int, n: int, timeout: float = 60) -> list[int]:
    wait_until(lambda: len(children_of(pid)) == n, timeout, f"{n} worker processes")
    return children_of(pid)


def wait_ready(sup: subprocess.Popen[bytes], port: int, n: int = 2) -> list[int]:
    """The group's /readyz says 200 (every child is up, its signal handlers installed);
    its children's pids."""
    wait_until(lambda: get(port, "/readyz")[0] == 200, 90, "the group ready")
    return wait_children(sup.pid, n)


def test_metrics_of_every_child_in_one_scrape(db_url: str) -> None:
    """Two children share the work; one scrape counts every delivery, each once; the
    backlog gauge is not multiplied; readyz and healthz speak for the group."""
    port = free_port()
    with Receiver(secret=SECRET, default=Behaviour(delay=0.02)) as rx, \
            running(db_url, "--processes", "2", OUTBOX_METRICS_PORT=str(port),
                    OUTBOX_CONCURRENCY="10", OUTBOX_BACKLOG_INTERVAL_SECONDS="0.2") as sup:
        wait_until(lambda: get(port, "/readyz")[0] == 200, 60, "the group ready")
        assert get(port, "/healthz") == (200, "ok\n")
        endpoint = add_endpoint(db_url, rx.url + "/hook")
        emit(db_url, 400)
        wait_until(lambda: states(db_url) == {"delivered": 400}, 120, "all delivered")
        time.sleep(1.0)  # the backlog gauges catch up
        text = get(port, "/metrics")[1]
        assert metric(text, "outbox_deliveries_total", outcome="delivered",
                      endpoint=str(endpoint)) == 400
        assert metric(text, "outbox_attempt_duration_seconds_count") == 400
        assert metric(text, "outbox_delivery_lag_seconds_count") == 400
        assert metric(text, "outbox_claimed_per_poll_sum") >= 400  # re-claims at the cap
        assert metric(text, "outbox_due_backlog") == 0
        assert metric(text, "outbox_worker_processes") == 2
        assert "pid=" not in text  # every series is the group's, none per process
        log = stop(sup)
    assert totals(log)["delivered"] == 400
    counts = [totals(line) for line in log.splitlines() if line.startswith("claimed=")]
    assert len(counts) == 3  # each child's, then the group's sum
    assert all(c["delivered"] > 0 for c in counts[:2]), f"work not shared: {counts}"
    assert rx.duplicates() == {}


def test_backlog_gauge_is_the_queue_not_n_times_it(db_url: str) -> None:
    """Every child reads the same backlog: the group reports it once, not summed."""
    port = free_port()
    add_endpoint(db_url, "http://127.0.0.1:9/unreachable")
    emit(db_url, 7)
    with psycopg.connect(db_url) as hold:  # due, but locked: claims skip them
        hold.execute("SELECT 1 FROM outbox.deliveries FOR UPDATE").fetchall()
        with running(db_url, "--processes", "2", OUTBOX_METRICS_PORT=str(port),
                     OUTBOX_WAKEUP="poll", OUTBOX_BACKLOG_INTERVAL_SECONDS="0.2") as sup:
            wait_until(lambda: get(port, "/readyz")[0] == 200, 60, "the group ready")
            time.sleep(1.0)
            assert metric(get(port, "/metrics")[1], "outbox_due_backlog") == 7
            stop(sup)


@pytest.mark.slow
def test_a_killed_child_is_replaced_and_nothing_is_lost(db_url: str) -> None:
    port = free_port()
    lease = {"OUTBOX_LEASE_SECONDS": "3", "OUTBOX_HTTP_TIMEOUT_SECONDS": "2"}
    with Receiver(secret=SECRET, default=Behaviour(delay=0.05)) as rx, \
            running(db_url, "--processes", "2", OUTBOX_METRICS_PORT=str(port),
                    OUTBOX_CONCURRENCY="20", **lease) as sup:
        first = wait_ready(sup, port)
        add_endpoint(db_url, rx.url + "/hook")
        ids = emit(db_url, 1500)
        assert rx.wait_for(200, 60)
        os.kill(first[0], signal.SIGKILL)
        wait_until(lambda: len(set(children_of(sup.pid)) - set(first)) == 1, 30,
                   "a replacement")
        assert get(port, "/healthz")[0] == 200
        wait_until(lambda: states(db_url) == {"delivered": 1500}, 180, "all delivered")
        text = get(port, "/metrics")[1]
        assert metric(text, "outbox_worker_restarts_total") == 1
        # the victim's counts survive it: every delivery was counted by some child (the
        # ones in flight at the kill perhaps twice)
        assert metric(text, "outbox_deliveries_total", outcome="delivered") >= 1500
        log = stop(sup)
    assert "killed by SIGKILL" in log and "starting another" in log
    assert set(rx.counts()) == {str(i) for i in ids}
    assert rows(db_url, LEASED) == [(0,)]


@pytest.mark.slow
def test_sigterm_drains_every_child_and_exits_0(db_url: str) -> None:
    port = free_port()
    with Receiver(secret=SECRET, default=Behaviour(delay=0.3)) as rx, \
            running(db_url, "--processes", "2", OUTBOX_CONCURRENCY="20",
                    OUTBOX_SHUTDOWN_GRACE_SECONDS="10", OUTBOX_METRICS_PORT=str(port)) as sup:
        children = wait_ready(sup, port)
        add_endpoint(db_url, rx.url + "/slow")
        ids = emit(db_url, 400)
        assert rx.wait_for(40, 60)
        log = stop(sup)
        assert not any(alive(pid) for pid in children)
    assert log.count("stopping: no new claims") == 2
    # in-flight requests were finished and recorded by both children
    assert rows(db_url, LEASED) == [(0,)]
    assert states(db_url).get("delivered") == len(rx.received) == totals(log)["delivered"]
    assert rx.duplicates() == {}
    assert len(ids) == 400


@pytest.mark.slow
def test_a_child_that_does_not_stop_in_time_fails_the_group(db_url: str) -> None:
    """A child stuck past the grace is SIGKILLed and the supervisor exits 1, naming it."""
    port = free_port()
    with running(db_url, "--processes", "2", OUTBOX_SHUTDOWN_GRACE_SECONDS="0",
                 OUTBOX_METRICS_PORT=str(port)) as sup:
        children = wait_ready(sup, port)
        os.kill(children[0], signal.SIGSTOP)  # frozen: cannot act on SIGTERM
        sup.send_signal(signal.SIGTERM)
        sup.wait(60)
        assert not alive(children[0])
    assert sup.returncode == 1
    assert "still running" in log_of(sup)
    assert "not every worker process stopped cleanly" in log_of(sup)
    assert "killed by SIGKILL" in log_of(sup)


@pytest.mark.slow
def test_children_stop_when_the_supervisor_is_killed(db_url: str) -> None:
    port = free_port()
    with running(db_url, "--processes", "2", OUTBOX_METRICS_PORT=str(port)) as sup:
        children = wait_ready(sup, port)
        sup.kill()
        sup.wait(10)
        wait_until(lambda: not any(alive(pid) for pid in children), 30,
                   "the children to exit")


def test_sigterm_while_the_children_start_is_a_clean_stop(db_url: str) -> None:
    """A child that is still starting has claimed nothing: SIGTERM ends it, cleanly."""
    with running(db_url, "--processes", "2") as sup:
        wait_children(sup.pid, 2)
        log = stop(sup)
    assert "not every worker process stopped cleanly" not in log


def test_drain_with_two_processes_delivers_everything(db_url: str) -> None:
    with Receiver(secret=SECRET) as rx:
        add_endpoint(db_url, rx.url + "/hook")
        ids = emit(db_url, 600)
        with running(db_url, "--drain", "--processes", "2") as sup:
            sup.wait(120)
        assert sup.returncode == 0, log_of(sup)[-3000:]
    assert states(db_url) == {"delivered": 600}
    assert set(rx.counts()) == {str(i) for i in ids}
    assert totals(log_of(sup))["delivered"] == 600


def plain(db_url: str) -> subprocess.Popen[bytes]:
    """``outbox worker`` with the default metrics port (OUTBOX_METRICS_PORT unset)."""
    env = {k: v for k, v in os.environ.items() if k != "OUTBOX_METRICS_PORT"}
    env.update({**FAST, "OUTBOX_DATABASE_URL": db_url, "OUTBOX_SCHEMA": SCHEMA,
                "OUTBOX_ALLOW_NETWORKS": "127.0.0.0/8", "OUTBOX_LOG_FORMAT": "text",
                "OUTBOX_CONCURRENCY": "5"})
    del env["OUTBOX_METRICS_HOST"]
    log = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the process)
    proc = subprocess.Popen([sys.executable, "-m", "outbox", "worker"], env=env,
                            stdout=subprocess.DEVNULL, stderr=log)
    LOGS[proc.pid] = log
    return proc


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
        return True


def test_two_plain_workers_on_one_host_both_run_and_deliver(db_url: str) -> None:
    """Default settings twice: the second finds the metrics port taken, says so in one
    line, and delivers without it; the first keeps serving it. (If something else on this
    machine holds the port already, both must say so and run.)"""
    default = WorkerSettings.model_fields["metrics_port"].default
    ours = port_free(default)
    busy = f"metrics port {default} on 0.0.0.0 is in use"
    with Receiver(secret=SECRET, default=Behaviour(delay=0.05)) as rx:
        add_endpoint(db_url, rx.url + "/hook")
        with killing(plain(db_url)) as one:
            if ours:
                wait_until(lambda: get(default, "/healthz")[0] == 200, 60, "the door")
            else:
                wait_until(lambda: busy in log_of(one), 60, "the first one's warning")
            with killing(plain(db_url)) as two:
                wait_until(lambda: busy in log_of(two) or two.poll() is not None, 60,
                           "the second one's warning")
                ids = emit(db_url, 300)
                wait_until(lambda: states(db_url) == {"delivered": 300}, 120, "delivered")
                assert two.poll() is None and one.poll() is None
                if ours:
                    assert get(default, "/readyz")[0] == 200
                logs = [stop(one), stop(two)]
    assert set(rx.counts()) == {str(i) for i in ids}
    assert all(totals(log)["delivered"] > 0 for log in logs), "both delivered"
    warning = [ln for ln in logs[1].splitlines() if busy in ln]
    assert len(warning) == 1 and "WARNING" in warning[0] and "--processes" in warning[0]
    assert (busy in logs[0]) is not ours


def test_a_metrics_port_that_was_set_and_is_taken_stays_an_error(db_url: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with running(db_url, "--metrics-port", str(port)) as proc:
            proc.wait(60)
        assert proc.returncode == 1
        assert f"error: cannot serve metrics on 127.0.0.1:{port}" in log_of(proc)
        with running(db_url, "--processes", "2", OUTBOX_METRICS_PORT=str(port)) as sup:
            sup.wait(60)
        assert sup.returncode == 1
        assert "OUTBOX_METRICS_PORT" in log_of(sup)
        assert "started worker process" not in log_of(sup)  # the port first, then children


def test_drain_with_a_child_that_fails_exits_1_at_once(db_url: str) -> None:
    """``--drain`` where every child fails (no outbox tables in that schema): like one
    ``outbox worker --drain``, exit 1 naming the failure; no child is started again."""
    with running(db_url, "--drain", "--processes", "2",
                 OUTBOX_SCHEMA="nosuchschema_review") as sup:
        sup.wait(60)
    log = log_of(sup)
    assert sup.returncode == 1, log[-3000:]
    assert "outbox tables not found" in log
    assert "error: worker process" in log and "exit status 1" in log
    assert log.count("started worker process") == 2
    assert "starting another" not in log


@pytest.mark.slow
def test_children_that_keep_failing_stop_the_group(db_url: str) -> None:
    """Without ``--drain``: a few restarts with backoff, then exit 1 (so that systemd or
    Kubernetes see it) instead of restarting for ever."""
    from outbox.delivery.supervisor import GIVE_UP_AFTER

    with running(db_url, "--processes", "2", OUTBOX_SCHEMA="nosuchschema_review") as sup:
        sup.wait(120)
    log = log_of(sup)
    assert sup.returncode == 1, log[-3000:]
    assert f"the {GIVE_UP_AFTER}th time in a row" in log and "giving up" in log
    assert "starting another in 1s" in log and "starting another in 2s" in log
    assert "not every worker process stopped cleanly" not in log.split("giving up")[0]


def test_ctrl_c_in_a_terminal_stops_the_group_cleanly(db_url: str) -> None:
    """Ctrl-C sends SIGINT to the terminal's whole foreground process group: the children
    (in groups of their own) do not get it, the supervisor stops them, exit 0."""
    env = {**os.environ, **FAST, "OUTBOX_DATABASE_URL": db_url, "OUTBOX_SCHEMA": SCHEMA,
           "OUTBOX_METRICS_PORT": "0", "OUTBOX_LOG_FORMAT": "text"}
    log = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the process)
    proc = subprocess.Popen([sys.executable, "-m", "outbox", "worker", "--processes", "2"],
                            env=env, stdout=subprocess.DEVNULL, stderr=log,
                            process_group=0)  # as a shell starts a foreground job
    LOGS[proc.pid] = log
    with killing(proc) as sup:
        children = wait_children(sup.pid, 2)  # still starting: no signal handlers yet
        assert os.getpgid(sup.pid) == sup.pid
        assert all(os.getpgid(pid) == pid for pid in children)  # not in the terminal's
        os.killpg(sup.pid, signal.SIGINT)
        sup.wait(60)
    assert sup.returncode == 0, log_of(sup)[-3000:]
    assert "KeyboardInterrupt" not in log_of(sup)

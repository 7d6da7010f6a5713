"""The test webhook receiver over real sockets: recording, signatures, scripts, hostility."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from outbox.errors import InvalidEndpoint
from outbox.signing import generate_secret, webhook_headers
from outbox.testing.receiver import Receiver
from tests.support.hostile import Behaviour

SECRET = generate_secret()
OTHER_SECRET = generate_secret()

Response = tuple[int, dict[str, str], bytes]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver(secret=SECRET) as rcv:
        yield rcv


def envelope(msg_id: str, kind: str = "order.created") -> bytes:
    return json.dumps({"type": kind, "data": {"id": msg_id}}).encode()


def post(
    rcv: Receiver, path: str, msg_id: str, *, body: bytes | None = None,
    secret: str = SECRET, timeout: float = 10.0,
) -> Response:
    """POST a signed envelope with http.client (never follows redirects, no status errors)."""
    payload = envelope(msg_id) if body is None else body
    headers = webhook_headers([secret], msg_id, payload)
    conn = http.client.HTTPConnection("127.0.0.1", rcv.port, timeout=timeout)
    try:
        conn.request("POST", path, body=payload, headers=headers)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def urllib_post(rcv: Receiver, path: str, msg_id: str, body: bytes, signed_body: bytes) -> int:
    headers = {"Content-Type": "application/json"}
    headers.update(webhook_headers([SECRET], msg_id, signed_body))
    request = urllib.request.Request(rcv.url + path, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=10) as resp:
        status: int = resp.status
        return status


def test_signed_post_is_recorded_with_valid_signature(receiver: Receiver) -> None:
    assert receiver.url == f"http://127.0.0.1:{receiver.port}"
    body = envelope("msg_1")
    before = time.time()
    assert urllib_post(receiver, "/hooks/a?x=1", "msg_1", body, body) == 200
    [got] = receiver.received
    assert got.path == "/hooks/a?x=1"
    assert got.webhook_id == "msg_1"
    assert got.body == body
    assert got.signature_ok is True
    assert got.headers["content-type"] == "application/json"
    assert got.timestamp is not None and abs(got.timestamp - before) < 5
    assert before <= got.at <= time.time()
    assert receiver.invalid_signatures() == []


def test_tampered_body_fails_signature(receiver: Receiver) -> None:
    signed = envelope("msg_2")
    tampered = signed.replace(b"order.created", b"order.deleted")
    assert urllib_post(receiver, "/hooks", "msg_2", tampered, signed) == 200
    [got] = receiver.received
    assert got.signature_ok is False
    assert receiver.invalid_signatures() == [got]


def test_wrong_secret_and_unsigned_requests() -> None:
    with Receiver(secret=SECRET) as rcv:
        post(rcv, "/x", "wrong", secret=OTHER_SECRET)
        conn = http.client.HTTPConnection("127.0.0.1", rcv.port, timeout=10)
        conn.request("POST", "/x", body=b"{}")
        assert conn.getresponse().status == 200
        conn.close()
        assert [r.signature_ok for r in rcv.received] == [False, False]
        assert rcv.received[1].webhook_id is None
        assert rcv.counts() == {"wrong": 1}


def test_secret_per_path_prefix_and_none_when_unknown() -> None:
    with Receiver(secret={"/a": SECRET, "/a/b": OTHER_SECRET}) as rcv:
        post(rcv, "/a/1", "m1", secret=SECRET)
        post(rcv, "/a/b/2", "m2", secret=OTHER_SECRET)
        post(rcv, "/a/b/3", "m3", secret=SECRET)
        post(rcv, "/c", "m4", secret=SECRET)
        assert [r.signature_ok for r in rcv.received] == [True, True, False, None]
        assert [r.webhook_id for r in rcv.invalid_signatures()] == ["m3"]


def test_malformed_secret_is_refused_up_front() -> None:
    with pytest.raises(InvalidEndpoint):
        Receiver(secret="whsec_not-base64!")


def test_counts_and_duplicates(receiver: Receiver) -> None:
    for msg_id in ["a", "b", "a", "c", "a", "b"]:
        post(receiver, "/hooks", msg_id)
    assert receiver.counts() == {"a": 3, "b": 2, "c": 1}
    assert receiver.duplicates() == {"a": 3, "b": 2}
    assert [r.webhook_id for r in receiver.received] == ["a", "b", "a", "c", "a", "b"]
    receiver.clear()
    assert receiver.received == [] and receiver.counts() == {}


def test_wait_for_blocks_until_enough_arrive(receiver: Receiver) -> None:
    def later() -> None:
        time.sleep(0.3)
        post(receiver, "/hooks", "late")
        post(receiver, "/hooks", "late")

    thread = threading.Thread(target=later)
    start = time.monotonic()
    thread.start()
    assert receiver.wait_for(2, timeout=10)
    assert time.monotonic() - start >= 0.3
    thread.join()
    assert not receiver.wait_for(2, timeout=0.2, distinct=True)
    start = time.monotonic()
    assert not receiver.wait_for(3, timeout=0.3)
    assert 0.3 <= time.monotonic() - start < 2
    assert receiver.wait_for(1, timeout=0, distinct=True)


def test_scripted_statuses_in_order_then_last_repeats(receiver: Receiver) -> None:
    receiver.script("/flaky", [Behaviour(503), Behaviour(503, body=b"busy"), Behaviour(200)])
    receiver.script("/teapot", [Behaviour(418, headers={"X-Why": "tea"}, body=b"short")])
    statuses = [post(receiver, "/flaky/1", f"f{i}")[0] for i in range(3)]
    assert post(receiver, "/other", "o")[0] == 200  # default, does not consume /flaky
    statuses += [post(receiver, "/flaky/2", f"f{i}")[0] for i in range(3, 5)]
    assert statuses == [503, 503, 200, 200, 200]
    status, headers, body = post(receiver, "/teapot", "t")
    assert (status, headers["X-Why"], headers["Content-Length"]) == (418, "tea", "5")
    assert body == b"short"
    assert len(receiver.received) == 7  # failures are recorded too


def test_default_behaviour_and_rescripting(receiver: Receiver) -> None:
    receiver.set_default(Behaviour(500))
    assert post(receiver, "/anything", "a")[0] == 500
    receiver.script("/p", [Behaviour(201), Behaviour(202)])
    assert [post(receiver, "/p", "b")[0] for _ in range(2)] == [201, 202]
    receiver.script("/p", [Behaviour(201), Behaviour(202)])
    assert post(receiver, "/p", "c")[0] == 201


def test_delay_holds_the_response(receiver: Receiver) -> None:
    receiver.script("/slow", [Behaviour(delay=0.4)])
    start = time.monotonic()
    assert post(receiver, "/slow", "s")[0] == 200
    assert time.monotonic() - start >= 0.4
    start = time.monotonic()
    assert post(receiver, "/fast", "f")[0] == 200
    assert time.monotonic() - start < 0.4


def test_redirect_sends_302_with_location(receiver: Receiver) -> None:
    receiver.script("/moved", [Behaviour(redirect_to="http://169.254.169.254/latest/")])
    status, headers, _ = post(receiver, "/moved", "r")
    assert status == 302
    assert headers["Location"] == "http://169.254.169.254/latest/"


def test_reset_is_a_tcp_rst_and_the_request_is_recorded(receiver: Receiver) -> None:
    receiver.script("/rst", [Behaviour(reset=True)])
    with pytest.raises(ConnectionResetError) as info:
        post(receiver, "/rst", "r")
    assert not isinstance(info.value, http.client.RemoteDisconnected)  # RST, not a clean FIN
    assert receiver.counts() == {"r": 1}


def test_garbage_is_not_http(receiver: Receiver) -> None:
    receiver.script("/junk", [Behaviour(garbage=True)])
    with pytest.raises(http.client.BadStatusLine):
        post(receiver, "/junk", "g")


def test_gzip_bomb_inflates_to_the_requested_size(receiver: Receiver) -> None:
    receiver.script("/bomb", [Behaviour(gzip_bomb_mb=3)])
    status, headers, body = post(receiver, "/bomb", "b")
    assert (status, headers["Content-Encoding"]) == (200, "gzip")
    assert len(body) < 64 * 1024
    assert gzip.decompress(body) == bytes(3 * 1024 * 1024)


def test_trickle_sends_one_byte_per_interval(receiver: Receiver) -> None:
    receiver.script("/drip", [Behaviour(trickle=0.1)])
    conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
    conn.request("POST", "/drip", body=b"{}")
    resp = conn.getresponse()
    assert resp.status == 200 and int(resp.headers["Content-Length"]) >= 1024 * 1024
    start = time.monotonic()
    assert len(resp.read(4)) == 4
    assert time.monotonic() - start >= 0.25
    conn.close()


def test_hang_never_answers_until_stop() -> None:
    rcv = Receiver(default=Behaviour(hang=True))
    with pytest.raises(TimeoutError):
        post(rcv, "/", "h", timeout=0.3)
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            post(rcv, "/", "h2", timeout=30)
        except (OSError, http.client.HTTPException) as exc:
            errors.append(exc)

    thread = threading.Thread(target=blocked)
    thread.start()
    assert rcv.wait_for(2, timeout=10)
    start = time.monotonic()
    rcv.stop()
    thread.join(timeout=10)
    assert time.monotonic() - start < 3
    assert len(errors) == 1  # the hung client got a closed connection, not a response


def test_keep_alive_reuses_one_connection(receiver: Receiver) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", receiver.port, timeout=10)
    socks = []
    for msg_id in ["k1", "k2"]:
        body = envelope(msg_id)
        conn.request("POST", "/ka", body=body, headers=webhook_headers([SECRET], msg_id, body))
        resp = conn.getresponse()
        assert resp.version == 11 and resp.status == 200 and not resp.will_close
        resp.read()
        socks.append(conn.sock)
    conn.close()
    assert socks[0] is not None and socks[0] is socks[1]
    assert [r.signature_ok for r in receiver.received] == [True, True]


def test_stop_closes_idle_keep_alive_connections() -> None:
    rcv = Receiver()
    conn = http.client.HTTPConnection("127.0.0.1", rcv.port, timeout=5)
    conn.request("POST", "/", body=b"{}")
    conn.getresponse().read()
    rcv.stop()
    assert conn.sock is not None
    conn.sock.settimeout(2)
    assert conn.sock.recv(1) == b""  # the server closed the idle socket (no timeout)
    conn.auto_open = 0  # reuse the pooled socket only; never reconnect
    with pytest.raises((OSError, http.client.HTTPException)):
        conn.request("POST", "/", body=b"{}")
        conn.getresponse()
    conn.close()
    assert len(rcv.received) == 1
    rcv.stop()  # idempotent


def test_300_concurrent_requests_are_each_recorded_once(receiver: Receiver) -> None:
    n = 300
    released: list[float] = []
    barrier = threading.Barrier(n, action=lambda: released.append(time.monotonic()), timeout=30)

    def one(i: int) -> int:
        barrier.wait()  # all 300 connect at once
        return post(receiver, f"/c/{i}", f"msg_{i}", timeout=30)[0]

    with ThreadPoolExecutor(max_workers=n) as pool:
        statuses = list(pool.map(one, range(n)))
    elapsed = time.monotonic() - released[0]
    assert statuses == [200] * n
    assert receiver.wait_for(n, timeout=0)
    assert receiver.counts() == {f"msg_{i}": 1 for i in range(n)}
    assert receiver.duplicates() == {} and receiver.invalid_signatures() == []
    print(f"{n} concurrent requests in {elapsed:.2f}s = {n / elapsed:.0f} req/s")


def test_standalone_command_prints_one_line_per_delivery() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "outbox.testing.receiver", "--port", "0", "--secret", SECRET],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        url = proc.stderr.readline().split()[-1]
        port = int(url.rsplit(":", 1)[1])
        for msg_id, secret in [("msg_ok", SECRET), ("msg_bad", OTHER_SECRET)]:
            body = envelope(msg_id, "user.signed_up")
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("POST", "/", body=body, headers=webhook_headers([secret], msg_id, body))
            assert conn.getresponse().status == 200
            conn.close()
        assert proc.stdout.readline() == "msg_ok user.signed_up signature=ok\n"
        assert proc.stdout.readline() == "msg_bad user.signed_up signature=bad\n"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

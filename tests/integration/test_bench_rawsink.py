"""The bench's minimal receiver (bench.rawsink): keep-alive answers, 250 ms for /slow, 404
for the aiohttp sink's /hang and /fail, a URL split across reads, and the report."""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

from bench.sink import Sink


def _post(sock: socket.socket, path: str, msg_id: str, *, split: bool = False) -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nhost: x\r\nwebhook-id: {msg_id}\r\n"
            "content-length: 2\r\n\r\n{}").encode()
    if split:  # the request line in two writes
        sock.sendall(head[:8])
        time.sleep(0.05)
        head = head[8:]
    sock.sendall(head)
    answer = b""
    while not answer.endswith(b"\r\n\r\n"):
        answer += sock.recv(4096)
    return answer


def test_the_minimal_receiver_answers_and_records() -> None:
    with Sink(server="raw") as sink:
        url = urlsplit(sink.url)
        with socket.create_connection((url.hostname, url.port)) as sock:
            assert _post(sock, "/fast", "a").startswith(b"HTTP/1.1 200 ")
            started = time.monotonic()
            assert _post(sock, "/slow1", "b", split=True).startswith(b"HTTP/1.1 200 ")
            assert time.monotonic() - started >= 0.25
            assert _post(sock, "/fail", "c").startswith(b"HTTP/1.1 404 ")
            assert _post(sock, "/fast", "a").startswith(b"HTTP/1.1 200 ")  # same connection
    report = sink.report
    assert report.requests == 4
    assert report.distinct == 3 and report.duplicates == 1
    assert report.loop.endswith(", raw")

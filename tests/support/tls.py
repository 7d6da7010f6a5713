"""Throwaway PKI and a receiver that requires a TLS client certificate (mutual TLS tests)."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pair:
    cert: str  # PEM
    key: str  # PEM, unencrypted
    subject: str


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem(key: ec.EllipticCurvePrivateKey, password: bytes | None = None) -> str:
    encryption = (serialization.BestAvailableEncryption(password) if password
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             encryption).decode()


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


class CA:
    """A certificate authority that issues server and client certificates."""

    def __init__(self, cn: str = "outbox test CA") -> None:
        self.key = _key()
        now = dt.datetime.now(dt.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - dt.timedelta(days=1))
                     .not_valid_after(now + dt.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.pem = self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def issue(self, cn: str, *, server: bool = False, days: float = 30,
              password: bytes | None = None) -> Pair:
        key = _key()
        now = dt.datetime.now(dt.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (x509.CertificateBuilder().subject_name(_name(cn))
                   .issuer_name(self.cert.subject).public_key(key.public_key())
                   .serial_number(x509.random_serial_number())
                   .not_valid_before(now - dt.timedelta(days=2))
                   .not_valid_after(now + dt.timedelta(days=days))
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return Pair(cert.public_bytes(serialization.Encoding.PEM).decode(),
                    _pem(key, password), f"CN={cn}")


class MutualTLSReceiver:
    """An HTTPS receiver on 127.0.0.1 that refuses any client without a certificate
    issued by ``ca``; it records each request's headers and the client's subject."""

    def __init__(self, ca: CA, tmp: Path) -> None:
        server = ca.issue("127.0.0.1", server=True)
        (tmp / "server.pem").write_text(server.cert + server.key)
        (tmp / "ca.pem").write_text(ca.pem)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tmp / "server.pem")
        context.load_verify_locations(tmp / "ca.pem")
        context.verify_mode = ssl.CERT_REQUIRED
        self.received: list[tuple[dict[str, str], str]] = []
        self.refused = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                peer: Any = self.connection.getpeercert()
                subject = ",".join(f"{k}={v}" for rdn in peer["subject"] for k, v in rdn)
                receiver.received.append(({k.lower(): v for k, v in self.headers.items()},
                                          subject))
                self.send_response(200)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self) -> tuple[Any, Any]:
                sock, address = self.socket.accept()
                return context.wrap_socket(sock, server_side=True,
                                           do_handshake_on_connect=False), address

            def finish_request(self, request: Any, client_address: Any) -> None:
                try:
                    request.do_handshake()
                except (ssl.SSLError, OSError):
                    receiver.refused += 1
                    return
                super().finish_request(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}/hooks"
        self.ca_file = str(tmp / "ca.pem")
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> MutualTLSReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

"""Fixtures: the real service on SQLite and on PostgreSQL (through scripts/ops/serve.sh), clients.

Each backend's server is started once per session by `serve_for_pytest.sh` on a free port with
a fresh database. PostgreSQL is never skipped: if it cannot be reached, its tests fail.
``DIRICHLET_BIN`` names the binary (default ``target/debug/dirichlet-release`` at the repository
root); ``DIRICHLET_TEST_BACKENDS`` (default ``sqlite,postgres``) chooses the backends.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Dict, Iterator, List, Optional, Tuple

import pytest

from dirichlet_release import Client

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
BACKENDS = [
    b.strip() for b in os.environ.get("DIRICHLET_TEST_BACKENDS", "sqlite,postgres").split(",")
]

# Figures the tests measured, printed at the end of the session (the retry-proxy result, the
# pandas round trip) so that a CI log shows them.
FACTS: List[str] = []


def record(fact: str) -> None:
    """Keep a measured fact for the session summary."""
    FACTS.append(fact)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if FACTS:
        terminalreporter.section("measured")
        for fact in FACTS:
            terminalreporter.write_line(fact)


def mirrors(model: Any, doc: Any, where: str = "answer") -> None:
    """Every member of the service's JSON is on the typed model, with the same value."""
    if dataclasses.is_dataclass(model):
        assert isinstance(doc, dict), where
        names = {f.name for f in dataclasses.fields(model)}
        for key, value in doc.items():
            assert key in names, f"{where}.{key} is not modelled"
            mirrors(getattr(model, key), value, f"{where}.{key}")
    elif isinstance(doc, list):
        assert isinstance(model, list) and len(model) == len(doc), where
        for i, (m, d) in enumerate(zip(model, doc)):
            mirrors(m, d, f"{where}[{i}]")
    else:
        assert model == doc and type(model) is not dict, where


@dataclass
class Server:
    backend: str
    base: str
    admin: str
    log: str


def _start(
    backend: str, env: Optional[Dict[str, str]] = None
) -> Tuple[subprocess.Popen[str], Server]:
    script = HERE / "serve_for_pytest.sh"
    process = subprocess.Popen(
        ["bash", str(script), backend],
        env=dict(os.environ, **(env or {})),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        text=True,
    )
    assert process.stdout is not None
    values: Dict[str, str] = {}
    stdout: IO[str] = process.stdout
    while len(values) < 3:
        line = stdout.readline()
        if not line:
            code = process.wait()
            pytest.fail(f"the {backend} server did not start (serve_for_pytest.sh exited {code})")
        if "=" in line:
            key, value = line.rstrip("\n").split("=", 1)
            values[key] = value
    return process, Server(backend, values["BASE"], values["ADMIN"], values["LOG"])


def _stop(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.close()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="session", params=BACKENDS)
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """The service on a fresh database of one backend, for the whole session."""
    process, started = _start(request.param)
    try:
        yield started
    finally:
        _stop(process)


@pytest.fixture(scope="session", params=BACKENDS)
def small_quota_server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """The service with an output quota of 12 stored cells per dataset (`max_stored_cells`)."""
    process, started = _start(request.param, {"DIRICHLET_MAX_STORED_CELLS": "12"})
    try:
        yield started
    finally:
        _stop(process)


@pytest.fixture()
def client(server: Server) -> Iterator[Client]:
    """An admin client of the server (no retry waits longer than a fraction of a second)."""
    with Client(server.base, server.admin, backoff=0.05, max_backoff=0.2) as c:
        yield c


@pytest.fixture()
def dataset_id(client: Client) -> str:
    """A fresh dataset with an RDP budget of ε = 1 at λ₀ = 2."""
    return client.create_dataset("pytest dataset", epsilon=1.0, order=2).id


# --------------------------------------------------------------------------- the fault proxy


@dataclass
class Seen:
    """One request the proxy received, and what it did with it."""

    method: str
    path: str
    idempotency_key: str
    action: str
    body: bytes = b""


class FaultProxy:
    """A TCP proxy in front of the service that can fail chosen requests.

    `plan` maps a request kind (``"release"``: POST …/releases; ``"preview"``;
    ``"create_dataset"``; ``"budget"``; ``"plan"``: POST …/plan) to the actions for its next
    requests, consumed in order; a request with no action left is forwarded; every request is
    kept in `seen`, with its body.
    Actions: ``"drop"`` forwards the request, reads the whole answer (so whatever the service
    did is done) and closes the client's connection without a byte; ``"503"`` answers 503
    ``service-unavailable`` with ``Retry-After`` without forwarding; ``"504"`` forwards, then
    answers 504 ``commit-outcome-unknown`` in place of the service's answer; ``"500"`` answers
    500 ``internal`` without forwarding; ``"garbage"`` answers 200 with a body that is not JSON;
    ``"hang"`` holds the request for `hang_seconds` without answering, then closes;
    ``"drop-early"`` forwards the request and closes both connections at once, without waiting
    for the service's answer (the service may still be drawing and committing when the retry
    arrives).
    """

    def __init__(self, upstream: str) -> None:
        import socket

        host, port = upstream.replace("http://", "").split(":")
        self.upstream = (host, int(port))
        self.plan: Dict[str, List[str]] = {}
        self.seen: List[Seen] = []
        self.retry_after = "1"
        self.hang_seconds = 2.0
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.base = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def requests(self, kind: str) -> List[Seen]:
        with self._lock:
            return [s for s in self.seen if _kind(s.method, s.path) == kind]

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: Any) -> None:
        import socket

        with conn:
            while True:
                request = _read_request(conn)
                if request is None:
                    return
                head, body = request
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip()
                    for k, v in (line.split(":", 1) for line in lines[1:] if ":" in line)
                }
                kind = _kind(method, path)
                with self._lock:
                    actions = self.plan.get(kind, [])
                    action = actions.pop(0) if actions else "forward"
                    self.seen.append(
                        Seen(method, path, headers.get("idempotency-key", ""), action, body)
                    )
                if action == "503":
                    conn.sendall(
                        _problem(503, "service-unavailable", {"Retry-After": self.retry_after})
                    )
                    continue
                if action == "500":
                    conn.sendall(_problem(500, "internal", {}))
                    continue
                if action == "garbage":
                    page = b"<html>not json</html>"
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(page)}\r\n\r\n".encode()
                        + page
                    )
                    continue
                if action == "hang":
                    time.sleep(self.hang_seconds)
                    return
                # One upstream connection per request, closed by the service after its answer.
                rewritten = [lines[0]] + [
                    line for line in lines[1:] if not line.lower().startswith("connection:")
                ]
                rewritten.append("Connection: close")
                with socket.create_connection(self.upstream) as up:
                    up.sendall("\r\n".join(rewritten).encode("latin-1") + b"\r\n\r\n" + body)
                    if action == "drop-early":
                        up.shutdown(socket.SHUT_WR)
                        conn.shutdown(socket.SHUT_RDWR)
                        return
                    answer = b""
                    while True:
                        chunk = up.recv(65536)
                        if not chunk:
                            break
                        answer += chunk
                if action == "drop":
                    conn.shutdown(socket.SHUT_RDWR)
                    return
                if action == "504":
                    conn.sendall(_problem(504, "commit-outcome-unknown", {}))
                    continue
                conn.sendall(answer)
                # The service closed after answering (Connection: close); so does the proxy.
                return


def _kind(method: str, path: str) -> str:
    path = path.split("?", 1)[0]
    if method == "POST" and path.endswith("/releases"):
        return "release"
    if method == "POST" and path.endswith("/releases/preview"):
        return "preview"
    if method == "POST" and path == "/v1/datasets":
        return "create_dataset"
    if method == "GET" and path.endswith("/budget"):
        return "budget"
    if method == "POST" and path.endswith("/plan"):
        return "plan"
    return f"{method} other"


def _read_request(conn: Any) -> Tuple[bytes, bytes] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return head, rest[:length]


def _problem(status: int, slug: str, extra: Dict[str, str]) -> bytes:
    import json

    reason = {500: "Internal Server Error", 503: "Service Unavailable", 504: "Gateway Timeout"}[
        status
    ]
    body = json.dumps(
        {
            "type": f"/problems/{slug}",
            "title": reason,
            "status": status,
            "detail": "injected by the test proxy",
        }
    ).encode()
    head = [
        f"HTTP/1.1 {status} {reason}",
        "Content-Type: application/problem+json",
        f"Content-Length: {len(body)}",
    ] + [f"{k}: {v}" for k, v in extra.items()]
    return "\r\n".join(head).encode() + b"\r\n\r\n" + body


@pytest.fixture()
def proxy(server: Server) -> Iterator[FaultProxy]:
    """A fault-injecting proxy in front of the server."""
    p = FaultProxy(server.base)
    try:
        yield p
    finally:
        p.close()

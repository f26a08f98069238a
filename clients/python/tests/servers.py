"""Servers the tests run: the real ``cairn serve``, a TCP proxy that kills connections, and
the one stand-in (an HTTP server answering Cairn's ``503 unavailable`` body before passing
requests on to the real server)."""

from __future__ import annotations

import http.client
import http.server
import json
import os
import pathlib
import shutil
import socket
import socketserver
import struct
import subprocess
import tempfile
import threading
import time
import urllib.request
from typing import Dict, List, Optional, Tuple

REPO = pathlib.Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cairn_binary() -> pathlib.Path:
    env = os.environ.get("CAIRN_BIN")
    path = pathlib.Path(env) if env else REPO / "target" / "release" / "cairn"
    path = path.resolve()  # a relative CAIRN_BIN is relative to the working directory
    if not path.exists():
        raise RuntimeError(
            f"no cairn binary at {path}: build it (cargo build --release --workspace --bin cairn) or set CAIRN_BIN"
        )
    return path


class CairnServer:
    """``cairn --data-dir <temp> serve --addr 127.0.0.1:<free port>`` with the real model."""

    def __init__(self, env: Optional[Dict[str, str]] = None, name: str = "cairn"):
        self.env = env or {}
        self.name = name
        self.proc: Optional[subprocess.Popen] = None
        self.data = pathlib.Path(tempfile.mkdtemp(prefix=f"pyclient-{name}-"))
        self.log_path = self.data.with_suffix(".log")
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait_s: float = 120.0) -> "CairnServer":
        try:
            return self._start(wait_s)
        except BaseException:
            self.cleanup()
            raise

    def _start(self, wait_s: float) -> "CairnServer":
        binary = cairn_binary()
        env = dict(os.environ)
        env.setdefault("CAIRN_HOME", str(REPO / ".cache"))
        # The caller's deployment settings must not leak in: keys only where a test asks,
        # always the embedded store in the temporary directory.
        for k in ("CAIRN_API_KEYS", "CAIRN_API_KEYS_FILE", "CAIRN_QDRANT_URL", "CAIRN_QDRANT_API_KEY",
                  "CAIRN_QDRANT_COLLECTION", "CAIRN_DATA_DIR", "CAIRN_ADDR"):
            env.pop(k, None)
        env.update(self.env)
        for _ in range(3):  # a free port can be taken between the probe and the bind
            self.port = free_port()
            log = open(self.log_path, "wb")
            self.proc = subprocess.Popen(
                [str(binary), "--data-dir", str(self.data / "data"), "serve", "--addr", f"127.0.0.1:{self.port}"],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            log.close()
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as r:
                        if r.status == 200:
                            return self
                except OSError:
                    pass
                time.sleep(0.2)
            if self.proc.poll() is None:
                self.stop()
                raise RuntimeError(f"{self.name}: no /healthz within {wait_s} s\n{self.log_tail()}")
            if b"address in use" not in self.log_path.read_bytes().lower():
                raise RuntimeError(f"{self.name}: cairn serve exited ({self.proc.returncode})\n{self.log_tail()}")
        raise RuntimeError(f"{self.name}: no free port\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.data, ignore_errors=True)
        try:
            self.log_path.unlink()
        except OSError:
            pass


# --- a TCP proxy that kills connections --------------------------------------------------------


def _read_http_message(sock: socket.socket, buf: bytes) -> Tuple[Optional[bytes], bytes]:
    """One HTTP/1.1 message (head + body by Content-Length or chunked) from ``sock``; returns
    (message, leftover), or (None, b"") when the peer closed first."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        buf += chunk
    head, rest = buf.split(b"\r\n\r\n", 1)
    headers = {}
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower()] = v.strip()
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        while not rest.endswith(b"0\r\n\r\n"):
            chunk = sock.recv(65536)
            if not chunk:
                return None, b""
            rest += chunk
        return head + b"\r\n\r\n" + rest, b""
    length = int(headers.get(b"content-length", b"0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return None, b""
        rest += chunk
    return head + b"\r\n\r\n" + rest[:length], rest[length:]


def _reset(sock: socket.socket) -> None:
    """Close with a TCP RST (SO_LINGER 0): the peer sees 'connection reset'."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class DroppingProxy:
    """Forwards HTTP/1.1 requests to ``upstream`` one by one. ``drop(path_part, when)`` arms
    it: the next request whose request line contains ``path_part`` is forwarded whole, and
    then the client's connection is reset — ``when="after_response"``: once the server has
    answered (the answer is thrown away: the write happened, the client cannot know);
    ``when="before_response"``: right away, while the server is still working on it."""

    def __init__(self, upstream_port: int):
        self.upstream_port = upstream_port
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.requests: List[str] = []  # request lines forwarded
        self.dropped: List[str] = []
        self._armed: List[Tuple[str, str]] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def drop(self, path_part: str, when: str = "after_response") -> None:
        assert when in ("after_response", "before_response")
        with self._lock:
            self._armed.append((path_part, when))

    def _take(self, request_line: str) -> Optional[str]:
        with self._lock:
            for i, (part, when) in enumerate(self._armed):
                if part in request_line:
                    del self._armed[i]
                    return when
        return None

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        cbuf = ubuf = b""
        try:
            while True:
                request, cbuf = _read_http_message(client, cbuf)
                if request is None:
                    return
                line = request.split(b"\r\n", 1)[0].decode("latin-1")
                with self._lock:
                    self.requests.append(line)
                when = self._take(line)
                upstream.sendall(request)
                if when == "before_response":
                    with self._lock:
                        self.dropped.append(line)
                    _reset(client)
                    # Let the server finish on its own; keep the upstream socket open until
                    # it answers so the server does not see a hang-up either.
                    _read_http_message(upstream, ubuf)
                    return
                response, ubuf = _read_http_message(upstream, ubuf)
                if response is None:
                    return
                if when == "after_response":
                    with self._lock:
                        self.dropped.append(line)
                    _reset(client)
                    return
                client.sendall(response)
        except OSError:
            return
        finally:
            try:
                client.close()
            except OSError:
                pass
            upstream.close()

    def count(self, path_part: str) -> int:
        with self._lock:
            return sum(1 for r in self.requests if path_part in r)

    def close(self) -> None:
        self._closed = True
        self.listener.close()


# --- the stand-in for `unavailable` --------------------------------------------------------------

UNAVAILABLE_BODY = {
    "error": {
        "code": "unavailable",
        "message": "stand-in: model or storage unavailable",
        "hint": "retry later",
    }
}


class Unavailable503Server:
    """A real local HTTP server in front of the real Cairn: while ``fail`` is above zero it
    answers each request ``503`` with Cairn's own error body (``UNAVAILABLE_BODY``, the shape
    and hint of ``api/src/error.rs``) and counts down; after that it forwards each request to
    Cairn and relays the answer. This is a stand-in for the one condition the tests cannot
    provoke on a healthy server (the model or the store going away); everything else the
    tests see comes from Cairn itself."""

    def __init__(self, upstream_port: int):
        outer = self
        self.upstream_port = upstream_port
        self.fail = 0
        self.retry_after: Optional[str] = None
        self.log: List[Tuple[float, str, str, int]] = []  # (time, method, path, status)
        self._lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _handle(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                with outer._lock:
                    failing = outer.fail > 0
                    if failing:
                        outer.fail -= 1
                arrived = time.monotonic()
                if failing:
                    data = json.dumps(UNAVAILABLE_BODY).encode()
                    with outer._lock:  # logged before answering, so the client never outruns it
                        outer.log.append((arrived, self.command, self.path, 503))
                    self.send_response(503)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    if outer.retry_after is not None:
                        self.send_header("retry-after", outer.retry_after)
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    conn = http.client.HTTPConnection("127.0.0.1", outer.upstream_port, timeout=60)
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    with outer._lock:
                        outer.log.append((arrived, self.command, self.path, resp.status))
                    self.send_response(resp.status)
                    for k, v in resp.getheaders():
                        if k.lower() not in ("content-length", "connection", "transfer-encoding", "date"):
                            self.send_header(k, v)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    conn.close()

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

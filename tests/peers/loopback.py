"""A scripted HTTP/1.1 server on 127.0.0.1 for byte-exact replays and fault cases.

Each request is answered by a :class:`Reply`: a status, headers and body *parts*, each sent as
one chunk of a chunked body, so the client sees the bytes exactly as given. Two markers shape
the flow: :data:`STALL` stops sending until the server is stopped (``stalled`` is set when a
reply reaches it) and :data:`DROP` closes the socket without ending the body (a dropped
connection). The status line and headers go out with the first bytes part, so a leading
marker stalls or drops before any response. Requests are recorded in ``requests``.

Runs in daemon threads with blocking sockets, so it is independent of the test's event loop.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


STALL = _Marker("STALL")
DROP = _Marker("DROP")

Part = bytes | _Marker


@dataclass
class Reply:
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"content-type": "text/event-stream"})
    parts: Sequence[Part] = ()


@dataclass
class Captured:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Handler = Callable[[Captured], Reply]


def sse_reply(body: bytes | str, *, piece: int = 0, status: int = 200) -> Reply:
    """An event-stream reply of ``body``, split into ``piece``-byte chunks when ``piece``."""
    raw = body.encode() if isinstance(body, str) else body
    parts: list[Part] = [raw[i : i + piece] for i in range(0, len(raw), piece)] if piece else [raw]
    return Reply(status=status, parts=parts)


def json_reply(status: int, payload: Any, headers: dict[str, str] | None = None) -> Reply:
    return Reply(
        status=status,
        headers={"content-type": "application/json", **(headers or {})},
        parts=[json.dumps(payload).encode()],
    )


class LoopbackServer:
    """``with LoopbackServer(handler) as server: server.url ...``.

    ``handler`` is a :class:`Reply` (answers every request), a list of replies (consumed in
    order) or a callable taking the :class:`Captured` request.
    """

    def __init__(self, handler: Handler | Reply | Sequence[Reply]) -> None:
        if isinstance(handler, Reply):
            reply = handler
            self._handler: Handler = lambda _req: reply
        elif callable(handler):
            self._handler = handler
        else:
            queue = list(handler)
            self._handler = lambda _req: queue.pop(0)
        self.requests: list[Captured] = []
        self.stalled = threading.Event()
        self._release = threading.Event()
        self._sock: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []

    @property
    def url(self) -> str:
        assert self._sock is not None
        host, port = self._sock.getsockname()
        return f"http://{host}:{port}"

    def __enter__(self) -> LoopbackServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        self._sock = sock
        thread = threading.Thread(target=self._accept_loop, name="loopback-accept", daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                # Wakes the thread blocked in accept(); close() alone does not on Linux.
                self._sock.shutdown(socket.SHUT_RDWR)
            self._sock.close()
        for conn in list(self._conns):
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        try:
            request = _read_request(conn)
            if request is None:
                return
            self.requests.append(request)
            reply = self._handler(request)
            head = [f"HTTP/1.1 {reply.status} Status"]
            head += [f"{k}: {v}" for k, v in reply.headers.items()]
            head += ["transfer-encoding: chunked", "connection: close", "", ""]
            pending_head: bytes | None = "\r\n".join(head).encode()
            for part in reply.parts:
                # The status line goes out with the first bytes, so a leading STALL or DROP
                # happens before the client has any response at all.
                if part is STALL:
                    self.stalled.set()
                    self._release.wait()
                    return
                if part is DROP:
                    return
                assert isinstance(part, bytes)
                if pending_head is not None:
                    conn.sendall(pending_head)
                    pending_head = None
                if part:
                    conn.sendall(b"%x\r\n%s\r\n" % (len(part), part))
            conn.sendall((pending_head or b"") + b"0\r\n\r\n")
        except OSError:
            return
        finally:
            conn.close()


def _read_request(conn: socket.socket) -> Captured | None:
    data = b""
    while b"\r\n\r\n" not in data:
        piece = conn.recv(65536)
        if not piece:
            return None
        data += piece
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        piece = conn.recv(65536)
        if not piece:
            break
        body += piece
    return Captured(method, path, headers, body)


def sse_events(events: Sequence[tuple[str | None, Any]]) -> bytes:
    """Encode ``(event name or None, data)`` pairs as an SSE body (data JSON unless str)."""
    out = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {payload}\n\n")
    return "".join(out).encode()

"""An HTTP/1.1 client bounded against its server: one deadline for a whole call and a cap on the reply's size.

``RemoteEnv`` talks to a server it may not control. ``requests``' ``timeout`` bounds each socket read, not the call,
so a server that sends one byte every few seconds holds a call for ever, and it reads a reply of any length into
memory. Here every socket operation of a call (connecting, sending, each read of the headers and the body, TLS
included) waits at most for what is left of the call's ``timeout``, so the call ends by its deadline however the
server trickles; and the body is read in pieces and refused as soon as it passes ``max_bytes`` (by its
``Content-Length`` before a byte of it is read). Resolving the server's name is left to the system's resolver.

One ``BoundedHTTP`` keeps one keep-alive connection, as a ``requests.Session`` does; a connection the server closed
while it was idle is noticed before a request is sent on it (so a request that cannot be repeated is never sent
twice), and a connection that failed during a call is dropped. Proxies from the environment are not used, and
redirects are not followed: an erl-serve reply is never one.
"""

from __future__ import annotations

import http.client
import math
import select
import socket
import ssl
import time
from urllib.parse import urlsplit

__all__ = ["BoundedHTTP", "HTTPDeadlineError", "HTTPTooLargeError"]

_CHUNK = 1 << 16


class HTTPDeadlineError(TimeoutError):
    """The call did not end within its deadline."""


class HTTPTooLargeError(ValueError):
    """The reply's body is larger than the cap."""


class _Clock:
    """The deadline of the call in progress, shared by a connection's sockets (plain, then TLS)."""

    def __init__(self) -> None:
        self.deadline = math.inf

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise HTTPDeadlineError("the call's deadline passed")
        return left


class _Deadline:
    """Socket methods that wait at most until the clock's deadline: each sets the timeout to what is left first."""

    clock: _Clock = _Clock()

    def _arm(self) -> None:
        self.settimeout(self.clock.remaining())

    def recv_into(self, *args, **kwargs):
        self._arm()
        return super().recv_into(*args, **kwargs)

    def recv(self, *args, **kwargs):
        self._arm()
        return super().recv(*args, **kwargs)

    def send(self, *args, **kwargs):
        self._arm()
        return super().send(*args, **kwargs)

    def sendall(self, data, *args):
        view = memoryview(data).cast("B")
        while view:  # piece by piece, so that each piece waits only for what is left
            view = view[self.send(view[:_CHUNK], *args):]


class _DeadlineSocket(_Deadline, socket.socket):
    """A plain socket bounded by its clock's deadline."""


class _DeadlineSSLSocket(_Deadline, ssl.SSLSocket):
    """The TLS socket of a ``_DeadlineSocket`` connection (``SSLContext.sslsocket_class``), bounded the same way."""


def _connect(address: tuple[str, int], clock: _Clock) -> socket.socket:
    """``socket.create_connection`` with ``_DeadlineSocket``s: each address tried waits at most until the deadline."""
    host, port = address
    error: OSError | None = None
    for family, kind, proto, _, where in socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM):
        sock = _DeadlineSocket(family, kind, proto)
        sock.clock = clock
        try:
            sock.settimeout(clock.remaining())
            sock.connect(where)
            return sock
        except OSError as failed:
            sock.close()
            error = failed
            if isinstance(failed, HTTPDeadlineError):
                break
    raise error if error is not None else OSError(f"no address found for {host}")


class BoundedHTTP:
    """Requests to one server (``base_url``), each bounded by ``timeout`` seconds and ``max_bytes`` of reply."""

    def __init__(self, base_url: str, timeout: float, max_bytes: int):
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.scheme, self.host = parts.scheme, parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.timeout, self.max_bytes = timeout, max_bytes
        self._clock = _Clock()
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        conn = self._conn
        if conn is not None and conn.sock is not None:
            readable, _, _ = select.select([conn.sock], [], [], 0)
            if readable:  # an idle keep-alive connection has nothing to say: the server closed it
                self.close()
                conn = None
        if conn is None:
            clock = self._clock
            if self.scheme == "https":
                context = ssl.create_default_context()
                context.sslsocket_class = _DeadlineSSLSocket
                conn = _TLSConnection(self.host, self.port, context=context)
            else:
                conn = http.client.HTTPConnection(self.host, self.port)
            conn._create_connection = lambda address, timeout=None, source=None: _connect(address, clock)
            conn.clock = clock
            self._conn = conn
        return conn

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """``(status, body)`` of one call; raises ``HTTPDeadlineError`` past the deadline, ``HTTPTooLargeError``
        past the size cap, and ``OSError`` / ``http.client.HTTPException`` when the connection fails."""
        self._clock.deadline = time.monotonic() + self.timeout
        conn = self._connection()
        try:
            headers = {"Accept": "application/json", "Connection": "keep-alive"}
            if body is not None:
                headers["Content-Type"] = "application/json"
            conn.request(method, self.prefix + path, body=body, headers=headers)
            response = conn.getresponse()
            length = response.getheader("Content-Length", "")
            if length.strip().isdigit() and int(length) > self.max_bytes:
                raise HTTPTooLargeError(f"the reply is {int(length):,} bytes long, more than the {self.max_bytes:,} "
                                        "this client accepts")
            chunks, size = [], 0
            while chunk := response.read(_CHUNK):
                size += len(chunk)
                if size > self.max_bytes:
                    raise HTTPTooLargeError(f"the reply is longer than the {self.max_bytes:,} bytes this client "
                                            "accepts")
                chunks.append(chunk)
            if response.will_close:
                self.close()
            return response.status, b"".join(chunks)
        except socket.timeout as error:  # a read or write that waited until the deadline
            self.close()
            raise HTTPDeadlineError(str(error)) from None
        except BaseException:
            self.close()  # whatever is left of the reply must not be read as the next one's
            raise
        finally:
            self._clock.deadline = math.inf

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class _TLSConnection(http.client.HTTPSConnection):
    """``HTTPSConnection`` whose TLS socket shares the plain socket's clock."""

    clock: _Clock

    def connect(self) -> None:
        super().connect()
        self.sock.clock = self.clock

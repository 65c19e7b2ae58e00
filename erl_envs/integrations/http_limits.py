"""What ``erl-serve`` accepts from a connection before any env sees it: host, origin, body size, time; and errors as
JSON.

``RequestLimits`` is an ASGI middleware around the whole app:

* **Host**, checked first. A page of another site can point its own name at 127.0.0.1 (DNS rebinding); the
  browser then sends that name as both ``Host`` and ``Origin``, so the origin check alone would take the page for
  one this server serves. A request whose ``Host`` is a name this server was not given (``localhost``, the name it
  binds, ``allowed_hosts``) is refused: HTTP with 403, a WebSocket handshake closed before it is accepted (403). An
  IP address as ``Host`` is always accepted: no page can rebind an address, and a server bound to every interface
  is reached by its addresses. A request without ``Host`` (HTTP/1.0 programs) is accepted; browsers always send it.
* **Origin.** A browser sends ``Origin`` with every cross-site POST and WebSocket handshake; a page on another site
  must not open sessions or play on a server it can reach (a server on 127.0.0.1 is reachable from any page the
  user's browser opens). A request whose ``Origin`` is neither this server's own (``Host``) nor in
  ``allowed_origins`` is refused: HTTP with 403, a WebSocket handshake closed before it is accepted (403).
  Programs (``RemoteEnv``, OpenEnv's clients, ``curl``) send no ``Origin`` and are not affected.
* **Body size and time.** The body is read here, in full, before the app: one larger than ``max_body_bytes`` is
  refused with 413 (by its ``Content-Length`` before a byte of it is read, or as soon as it passes the limit), and
  one that does not arrive within ``body_timeout_s`` with 408; either way the connection is closed.
* **Errors.** An exception no handler turned into a 4xx answer is a bug: it is logged with its traceback and
  answered with 500 ``{"error": ...}`` here, so the keep-alive connection stays usable (Starlette's own last-resort
  handler answers and then re-raises, which makes the server drop the connection under the client).

``timed_protocol(timeout_s)`` is uvicorn's HTTP/1.1 protocol with a deadline for the request line and headers, so a
connection that opens and sends nothing, or trickles its headers, is closed after ``timeout_s`` instead of being
held for ever (uvicorn only times out idle keep-alive connections between requests).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
from typing import Any, Awaitable, Callable, Iterable
from urllib.parse import urlsplit

__all__ = ["RequestLimits", "timed_protocol", "json_error", "LOCAL_HOST_NAMES", "host_name"]

log = logging.getLogger("erl-serve")

# The names every server answers to; the name it binds and ``allowed_hosts`` are added.
LOCAL_HOST_NAMES = ("localhost", "127.0.0.1", "::1")

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def json_error(status: int, message: str, close: bool = False) -> tuple[Message, Message]:
    """The two ASGI messages of a ``{"error": message}`` answer."""
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    return ({"type": "http.response.start", "status": status, "headers": headers},
            {"type": "http.response.body", "body": body})


def host_name(host: str) -> str:
    """The name in a ``Host`` header value (or a ``--host`` setting): no port, no IPv6 brackets, lower case, no
    trailing dot (``localhost.`` is ``localhost``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    if host.count(":") == 1:  # name:port (more than one colon is an IPv6 address without brackets)
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class _BodyRefused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class RequestLimits:
    """The ASGI middleware described in the module docstring."""

    def __init__(self, app: Callable, max_body_bytes: int, body_timeout_s: float,
                 allowed_origins: Iterable[str] = (), allowed_hosts: Iterable[str] = ()):
        if max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be at least 1, got {max_body_bytes}")
        if not body_timeout_s > 0:
            raise ValueError(f"the request timeout must be positive, got {body_timeout_s}")
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.allowed_origins = {origin.rstrip("/").lower() for origin in allowed_origins}
        self.allowed_hosts = {host_name(host) for host in (*LOCAL_HOST_NAMES, *allowed_hosts)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {name.lower(): value for name, value in scope.get("headers", [])}
        refusal = self._host_refusal(headers) or self._origin_refusal(headers)
        if refusal is not None:
            log.warning("erl-serve: %s", refusal)
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008, "reason": "host or origin not allowed"})
            else:
                for message in json_error(403, refusal):
                    await send(message)
            return
        if scope["type"] == "websocket":  # message sizes are bounded by the server's ws_max_size
            await self.app(scope, receive, send)
            return
        try:
            body = await self._read_body(headers, receive)
        except _BodyRefused as refused:
            for message in json_error(refused.status, refused.message, close=True):
                await send(message)
            return
        await self._call_app(scope, _replay(body, receive), send)

    def _host_refusal(self, headers: dict[bytes, bytes]) -> str | None:
        host = headers.get(b"host")
        if host is None:
            return None
        text = host.decode("latin-1").strip()
        name = host_name(text)
        if "*" in self.allowed_hosts or name in self.allowed_hosts or _is_address(name):
            return None
        return (f"refused a request for the host name {text[:100]!r}: this server answers to localhost, its own "
                f"addresses and the names it is given, since a web page of another site can point its own name "
                f"here (DNS rebinding); start erl-serve with --allowed-hosts {name[:100]} to allow that name")

    def _origin_refusal(self, headers: dict[bytes, bytes]) -> str | None:
        origin = headers.get(b"origin")
        if origin is None:
            return None
        text = origin.decode("latin-1").strip()
        if "*" in self.allowed_origins or text.rstrip("/").lower() in self.allowed_origins:
            return None
        host = headers.get(b"host", b"").decode("latin-1").strip().lower()
        if host and urlsplit(text).netloc.lower() == host:
            return None  # same origin: a page this server serves (its Host passed the check above)
        return (f"refused a request from the web page at {text[:100]!r}: browsers may not drive this server from "
                f"other sites (start erl-serve with --allow-origin {text[:100]} to allow that one)")

    async def _read_body(self, headers: dict[bytes, bytes], receive: Receive) -> bytes:
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body_bytes:
            raise _BodyRefused(413, f"the request body is {int(length):,} bytes, more than this server accepts "
                                    f"({self.max_body_bytes:,})")
        chunks, size = [], 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), timeout=max(deadline - loop.time(), 0.001))
            except asyncio.TimeoutError:
                raise _BodyRefused(408, f"the request body did not arrive within {self.body_timeout_s:g} s") \
                    from None
            if message["type"] == "http.disconnect":
                raise _BodyRefused(400, "the client went away before sending its whole body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _BodyRefused(413, f"the request body is more than the {self.max_body_bytes:,} bytes this "
                                        "server accepts")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _call_app(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked_send)
        except Exception as error:  # noqa: BLE001 - every 4xx has its handler; what reaches here is a bug
            log.exception("erl-serve: internal error")
            if started:
                raise
            for message in json_error(500, f"internal error: {type(error).__name__}: {error}"[:1000]):
                await send(message)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the app the body read already, then waits on the connection (for a disconnect)."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def timed_protocol(timeout_s: float) -> type:
    """uvicorn's h11 protocol class with a deadline for each request's line and headers (see the module docstring).

    The deadline starts when the connection opens and again whenever bytes arrive while no request is in progress;
    it is met by a request whose headers are complete (the body has ``RequestLimits``' deadline). A connection that
    has not started a new request by then is closed. A connection upgraded to a WebSocket leaves it: its session
    lasts as long as the client keeps it, and the WebSocket protocol's pings close a dead one.
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11Protocol(H11Protocol):
        def connection_made(self, transport) -> None:  # noqa: ANN001 - asyncio's transport
            super().connection_made(transport)
            self._header_deadline = None
            self._arm_header_deadline()

        def data_received(self, data: bytes) -> None:
            if self._header_deadline is None and (self.cycle is None or self.cycle.response_complete):
                self._arm_header_deadline()
            super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_header_deadline()
            super().connection_lost(exc)

        def handle_websocket_upgrade(self, event) -> None:  # noqa: ANN001 - h11's request event
            self._cancel_header_deadline()  # the WebSocket protocol takes the connection over (pings keep it honest)
            super().handle_websocket_upgrade(event)

        def _cancel_header_deadline(self) -> None:
            if self._header_deadline is not None:
                self._header_deadline.cancel()
                self._header_deadline = None

        def _arm_header_deadline(self) -> None:
            waiting_after = self.cycle  # the request before the one that must arrive

            def expire() -> None:
                self._header_deadline = None
                if self.transport.get_protocol() is not self:
                    return  # upgraded: no longer an HTTP connection
                if self.cycle is waiting_after and not self.transport.is_closing():
                    log.info("erl-serve: closed a connection that sent no complete request within %g s", timeout_s)
                    self.transport.close()

            self._header_deadline = self.loop.call_later(timeout_s, expire)

    return TimedH11Protocol

"""RemoteEnv against a hostile server (a small HTTP server in this process, on 127.0.0.1): one that trickles its
reply, streams without end, announces 2 GB, nests JSON deeply or sends fields of the wrong type. Every case is one
``RemoteEnvError`` line naming the server, within the call's deadline and with the client's memory bounded (the
client runs in a subprocess that reports its peak RSS)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from erl_envs.integrations.remote import RemoteEnv, RemoteEnvError
from paths import ROOT

INFO = {"env_id": "Hostile-v0", "instructions": "play", "prompt_style": "generic",
        "observation_space": {"kind": "FreeText", "min_length": 0, "max_length": 100, "charset": "ab"},
        "action_space": {"kind": "FreeText", "min_length": 0, "max_length": 100, "charset": "ab"}}
RESULT = {"observation": {"text": "hello", "terminated": False, "truncated": False, "info": {}}, "reward": 0.0,
          "done": False}
LONGEST_S = 90.0  # a handler never outlives this, whatever the client does


class _Hostile(BaseHTTPRequestHandler):
    """Answers ``/info`` and ``POST /sessions`` honestly and the path ``server.target`` (``/info`` or ``/reset``)
    with ``server.behaviour``."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", "Content-Length": str(len(body)),
                            **(headers or {})}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.path.endswith(self.server.target):
            self.server.behaviour(self)
        elif self.path == "/info":
            self._send(200, json.dumps(INFO).encode())
        elif self.path == "/sessions":
            self._send(200, json.dumps({"session_id": "abc"}).encode())
        else:
            self._send(200, json.dumps(RESULT).encode())

    do_GET = do_POST = do_DELETE = _answer


def trickle(interval: float):
    """A reply whose bytes come one every ``interval`` seconds (each read returns well within any timeout)."""
    def behave(handler: _Hostile) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "1000")
        handler.end_headers()
        handler.wfile.flush()
        end = time.monotonic() + LONGEST_S
        try:
            while time.monotonic() < end:
                handler.wfile.write(b" ")
                handler.wfile.flush()
                time.sleep(interval)
        except OSError:
            pass  # the client hung up: what it should do

    return behave


def endless(handler: _Hostile) -> None:
    """A chunked reply that never ends: the start of a JSON string, then more of it, as fast as the socket takes."""
    handler.send_response(200)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    chunk = b"a" * (1 << 16)
    frame = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    end = time.monotonic() + LONGEST_S
    try:
        handler.wfile.write(b'3\r\n{"e\r\n')
        while time.monotonic() < end:
            handler.wfile.write(frame)
    except OSError:
        pass


def huge_length(handler: _Hostile) -> None:
    """Announces a 2 GB reply (and sends some of it)."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(2 << 30))
    handler.end_headers()
    try:
        handler.wfile.write(b"[" * (1 << 20))
    except OSError:
        pass


def reply(body: bytes | str):
    return lambda handler: handler._send(200, body if isinstance(body, bytes) else body.encode())


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # a client hanging up on a hostile reply is the point, not an error


class HostileServer:
    def __init__(self, behaviour, target: str = "/info", tls=None):
        self.server = _QuietServer(("127.0.0.1", 0), _Hostile)
        if tls is not None:  # an ssl.SSLContext: serve https
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.server.behaviour, self.server.target = behaviour, target
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "HostileServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


CLIENT = """
import json, resource, sys, time
from erl_envs.integrations.remote import RemoteEnv, RemoteEnvError
url, timeout, target = sys.argv[1], float(sys.argv[2]), sys.argv[3]
start_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.monotonic()
error = None
try:
    env = RemoteEnv(url, timeout=timeout)
    if target == "/reset":
        env.reset(seed=0)
except RemoteEnvError as caught:
    error = str(caught)
print(json.dumps({"seconds": time.monotonic() - started, "error": error,
                  "growth_mb": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - start_kb) / 1024}))
"""


def _client(url: str, timeout: float, target: str = "/info") -> dict:
    """RemoteEnv in a fresh process against ``url``: how long it took, its error line, its peak memory growth."""
    result = subprocess.run([sys.executable, "-c", CLIENT, url, str(timeout), target], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                            timeout=timeout + 120)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def _one_line_naming(error: str | None, url: str) -> str:
    assert error is not None and "\n" not in error and url in error, error
    return error


@pytest.mark.parametrize("target", ["/info", "/reset"])
def test_a_trickling_server_is_abandoned_at_the_deadline(target):
    with HostileServer(trickle(1.0), target) as server:
        got = _client(server.url, timeout=2.0, target=target)
    assert "did not answer" in _one_line_naming(got["error"], server.url) and "2 s timeout" in got["error"]
    assert got["seconds"] < 4.0, got  # the whole call, not each read: ``requests`` would wait for ever here


def test_an_endless_reply_is_refused_at_the_size_cap_with_memory_bounded():
    with HostileServer(endless) as server:
        got = _client(server.url, timeout=10.0)
    assert "longer than the 16,777,216 bytes" in _one_line_naming(got["error"], server.url)
    assert got["seconds"] < 10.0 and got["growth_mb"] < 200, got


def test_a_2gb_content_length_is_refused_before_reading():
    with HostileServer(huge_length) as server:
        got = _client(server.url, timeout=10.0)
    assert f"{2 << 30:,} bytes long" in _one_line_naming(got["error"], server.url)
    assert got["seconds"] < 5.0 and got["growth_mb"] < 50, got


@pytest.mark.slow
@pytest.mark.parametrize("behaviour", ["trickle", "endless"])
def test_the_issues_cases_with_a_10_s_timeout(behaviour):
    """The report's numbers: 1 byte every 5 s, or a reply without end, against ``timeout=10``: raises within 20 s,
    the process under 200 MB more than at its start."""
    with HostileServer(trickle(5.0) if behaviour == "trickle" else endless, "/reset") as server:
        got = _client(server.url, timeout=10.0, target="/reset")
    _one_line_naming(got["error"], server.url)
    assert got["seconds"] < 20.0 and got["growth_mb"] < 200, got


@pytest.mark.parametrize("target,body,words", [
    ("/info", "[" * 50_000 + "]" * 50_000, "not valid JSON (nested deeper than 100 levels)"),
    ("/info", "not json", "not valid JSON"),
    ("/info", json.dumps([1, 2]), "the reply is a list, not an object"),
    ("/info", json.dumps({**INFO, "instructions": ["a", "list"]}), "instructions is a list, not a string"),
    ("/info", json.dumps({**INFO, "action_space": {**INFO["action_space"], "kind": "Box"}}), "action_space.kind"),
    ("/sessions", json.dumps({"session_id": "../../info"}), "is not an id"),
    ("/reset", json.dumps({"observation": 5, "reward": 0}), "observation is a number, not an object"),
    ("/reset", json.dumps({**RESULT, "observation": {**RESULT["observation"], "text": ["x"]}}),
     "observation.text is a list, not a string"),
    ("/reset", json.dumps({**RESULT, "reward": "1"}), "reward is a string, not a number"),
    ("/reset", json.dumps({**RESULT, "observation": {**RESULT["observation"], "terminated": 0}}),
     "observation.terminated is a number, not a boolean"),
    ("/reset", json.dumps({**RESULT, "observation": {**RESULT["observation"], "info": None}}),
     "observation.info is null, not an object"),
])
def test_a_reply_of_the_wrong_shape_is_one_line(target, body, words):
    with HostileServer(reply(body), target) as server:
        with pytest.raises(RemoteEnvError) as caught:
            env = RemoteEnv(server.url, timeout=5)
            env.reset(seed=0)
    assert words in _one_line_naming(str(caught.value), server.url) and caught.value.status is None


def test_a_step_of_the_wrong_shape_is_one_line_too():
    def behave(handler: _Hostile) -> None:
        handler._send(200, json.dumps({"observation": {"text": 5}, "reward": 0}).encode())

    with HostileServer(behave, "/step") as server:
        env = RemoteEnv(server.url, timeout=5)
        assert env.reset(seed=0) == ("hello", {})
        with pytest.raises(RemoteEnvError) as caught:
            env.step("a")
    assert "malformed reply to POST /sessions/{id}/step: observation.text is a number" in str(caught.value)


def _self_signed(folder) -> tuple[str, str]:
    """A certificate for 127.0.0.1 and its key, as PEM files in ``folder``."""
    import datetime
    import ipaddress

    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


@pytest.mark.parametrize("behaviour", ["honest", "trickle"])
def test_the_deadline_holds_over_tls_too(tmp_path, monkeypatch, behaviour):
    """Over https the reads go through the TLS socket: it is bounded by the same deadline."""
    import ssl

    cert, key = _self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", cert)  # the client trusts this one certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    with HostileServer(trickle(1.0) if behaviour == "trickle" else reply(json.dumps(RESULT)), "/reset",
                       tls=context) as server:
        env = RemoteEnv(server.url, timeout=2)
        started = time.monotonic()
        if behaviour == "honest":
            assert env.reset(seed=0) == ("hello", {}) and env.step("a")[0] == "hello"
        else:
            with pytest.raises(RemoteEnvError, match="did not answer POST /sessions/abc/reset within the 2 s"):
                env.reset(seed=0)
            assert time.monotonic() - started < 4.0

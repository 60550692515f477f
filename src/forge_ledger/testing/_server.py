"""A small OpenAI-compatible HTTP server on 127.0.0.1 that answers from a script.

Why a real server rather than a mock: the provider code must be exercised through litellm,
the OpenAI SDK and httpx exactly as in production — SSE parsing, usage chunks, HTTP status
mapping, Retry-After headers, connections cut mid-stream. Only the model is fake.

It uses the standard library only (``ThreadingHTTPServer``: one thread per connection, so
concurrent streams really overlap). Streams use chunked transfer encoding so that a
``disconnect`` fault is a genuinely incomplete body, not a clean end of file.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from ._script import Fault, ReplyRule, Script, load_script, pick_rule

__all__ = ["FakeOpenAIServer", "RecordedRequest", "split_chunks", "word_count"]


def word_count(text: str) -> int:
    """Deterministic token stand-in: whitespace-separated words."""
    return len(text.split())


def split_chunks(text: str) -> list[str]:
    """Split text into streamable pieces (one word with its trailing whitespace each)."""
    return re.findall(r"\s*\S+\s*", text) or ([text] if text else [])


@dataclass
class RecordedRequest:
    """One request the server received (for assertions in tests)."""

    method: str
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    received_at: float
    """``time.monotonic()`` when the request was read."""
    model: str = ""
    stream: bool = False
    rule_index: int | None = None
    fault: str | None = None
    finished_at: float | None = None
    """``time.monotonic()`` when the server finished answering (None while in flight)."""

    @property
    def last_user_message(self) -> str:
        return _last_user_message(self.body)


def _last_user_message(body: Mapping[str, Any]) -> str:
    for msg in reversed(body.get("messages") or []):
        if isinstance(msg, Mapping) and msg.get("role") == "user":
            content = msg.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _prompt_words(body: Mapping[str, Any]) -> int:
    total = 0
    for msg in body.get("messages") or []:
        if isinstance(msg, Mapping) and isinstance(msg.get("content"), str):
            total += word_count(msg["content"])
    return total


@dataclass
class _State:
    script: Script
    latency: float
    stopping: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    used: dict[tuple[str, int], int] = field(default_factory=dict)
    requests: list[RecordedRequest] = field(default_factory=list)
    counter: int = 0

    def pick(self, model: str, text: str) -> tuple[int, ReplyRule] | None:
        with self.lock:
            return pick_rule(self.script, self.used, model, text)

    def next_id(self) -> str:
        with self.lock:
            self.counter += 1
            return f"chatcmpl-fake-{self.counter:06d}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging (tests and the demo own stderr)."""

    # ----------------------------------------------------------------- routing

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            names = sorted(self.server.state.script.models)
            self._json(
                200,
                {
                    "object": "list",
                    "data": [
                        {"id": n, "object": "model", "created": 0, "owned_by": "forge-ledger-fake"}
                        for n in names
                    ],
                },
            )
        else:
            self._error(404, "not_found", f"no route GET {self.path}")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.split("?")[0].rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._error(404, "not_found", f"no route POST {self.path}")
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not an object")
        except ValueError:
            self._error(400, "invalid_request_error", "request body is not a JSON object")
            return
        state = self.server.state
        rec = RecordedRequest(
            method="POST",
            path=self.path,
            body=body,
            headers={k.lower(): v for k, v in self.headers.items()},
            received_at=time.monotonic(),
            model=str(body.get("model", "")),
            stream=bool(body.get("stream")),
        )
        with state.lock:
            state.requests.append(rec)
        try:
            picked = state.pick(rec.model, rec.last_user_message)
            if picked is None:
                self._error(
                    400,
                    "invalid_request_error",
                    f"fake server: no scripted reply left for model {rec.model!r}",
                )
                return
            rec.rule_index, rule = picked
            rec.fault = rule.fault.value if rule.fault else None
            self._answer(rec, rule)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            rec.finished_at = time.monotonic()

    # ----------------------------------------------------------------- replies

    def _answer(self, rec: RecordedRequest, rule: ReplyRule) -> None:
        state = self.server.state
        latency = state.latency if rule.latency is None else rule.latency
        if latency and state.stopping.wait(latency):
            return
        fault = rule.fault
        if fault is Fault.HANG:
            state.stopping.wait()
            self.close_connection = True
            return
        http_faults = {
            Fault.RATE_LIMIT: (429, "rate_limit_exceeded", "fake server: rate limited"),
            Fault.SERVER_ERROR: (500, "server_error", "fake server: internal error"),
            Fault.UNAVAILABLE: (503, "service_unavailable", "fake server: overloaded"),
            Fault.UNAUTHORIZED: (401, "invalid_api_key", "fake server: incorrect API key"),
            Fault.FORBIDDEN: (403, "permission_denied", "fake server: this key may not use it"),
            Fault.UNKNOWN_MODEL: (
                404,
                "model_not_found",
                f"The model `{rec.model}` does not exist or you do not have access to it.",
            ),
            Fault.CONTEXT_WINDOW: (
                400,
                "context_length_exceeded",
                "This model's maximum context length is 16 tokens. However, your messages "
                f"resulted in {_prompt_words(rec.body)} tokens. Please reduce the length of "
                "the messages.",
            ),
        }
        if fault in http_faults:
            status, code, message = http_faults[fault]
            message = rule.error_message or message
            headers: dict[str, str] = {}
            if fault is Fault.RATE_LIMIT:
                headers["Retry-After"] = _fmt_seconds(rule.retry_after)
            if fault is Fault.UNAUTHORIZED:
                token = rec.headers.get("authorization", "").removeprefix("Bearer ").strip()
                message = f"{message} provided: {token}"
            self._error(status, code, message, headers=headers)
            return
        if fault is Fault.EMPTY:
            self.send_response(200)
            self.send_header(
                "Content-Type", "text/event-stream" if rec.stream else "application/json"
            )
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if rec.stream:
            self._stream(rec, rule)
        else:
            self._complete(rec, rule)

    def _usage(self, rec: RecordedRequest, content: str) -> dict[str, int]:
        p, c = _prompt_words(rec.body), word_count(content)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    def _complete(self, rec: RecordedRequest, rule: ReplyRule) -> None:
        no_finish = rule.fault is Fault.NO_FINISH
        doc: dict[str, Any] = {
            "id": self.server.state.next_id(),
            "object": "chat.completion",
            "created": 0,
            "model": rec.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": rule.content},
                    "finish_reason": None if no_finish else rule.finish_reason,
                }
            ],
        }
        if not no_finish:
            doc["usage"] = self._usage(rec, rule.content)
        if rule.fault in (Fault.STALL, Fault.MALFORMED_CHUNK, Fault.DISCONNECT):
            data = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            if rule.fault is Fault.STALL:
                self.server.state.stopping.wait()
            self.close_connection = True
            return
        self._json(200, doc)

    def _stream(self, rec: RecordedRequest, rule: ReplyRule) -> None:
        state = self.server.state
        cid = state.next_id()
        pieces = split_chunks(rule.content)
        cut = max(1, len(pieces) // 2) if pieces else 0

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": rec.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._send_event(chunk({"role": "assistant", "content": ""}))
        for i, piece in enumerate(pieces):
            if rule.fault in (Fault.STALL, Fault.MALFORMED_CHUNK, Fault.DISCONNECT) and i == cut:
                self._mid_stream_fault(rule.fault)
                return
            if i and rule.chunk_delay and state.stopping.wait(rule.chunk_delay):
                return
            self._send_event(chunk({"content": piece}))
        if rule.fault in (Fault.STALL, Fault.MALFORMED_CHUNK, Fault.DISCONNECT):
            self._mid_stream_fault(rule.fault)  # no content at all: fail right away
            return
        if rule.fault is not Fault.NO_FINISH:
            self._send_event(chunk({}, rule.finish_reason))
            if (rec.body.get("stream_options") or {}).get("include_usage"):
                self._send_event(
                    {
                        "id": cid,
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": rec.model,
                        "choices": [],
                        "usage": self._usage(rec, rule.content),
                    }
                )
        self._send_raw(b"data: [DONE]\n\n")
        self._end_chunked()

    def _mid_stream_fault(self, fault: Fault) -> None:
        if fault is Fault.STALL:
            self.server.state.stopping.wait()
        elif fault is Fault.MALFORMED_CHUNK:
            self._send_raw(b'data: {"id": "broken", "choices": [{"delta": {"content": \n\n')
            self._end_chunked()
        # DISCONNECT (and the other two afterwards): close without a final zero-length chunk.
        self.close_connection = True

    # ----------------------------------------------------------------- wire helpers

    def _send_event(self, doc: Mapping[str, Any]) -> None:
        self._send_raw(b"data: " + json.dumps(doc).encode() + b"\n\n")

    def _send_raw(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _json(
        self, status: int, doc: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _error(
        self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None
    ) -> None:
        self._json(
            status,
            {"error": {"message": message, "type": code, "code": code, "param": None}},
            headers,
        )


def _fmt_seconds(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024
    """Connections waiting to be accepted (the listen backlog; the standard library's is 5).
    A study opens dozens at once: past the backlog the kernel drops them, and each comes
    back only after TCP's one-second retry, a delay no real provider adds."""
    state: _State

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients closing keep-alive connections (or the injected faults) are normal here;
        anything else is still reported the standard way."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class FakeOpenAIServer:
    """An OpenAI-compatible chat-completions server answering from a :class:`Script`.

    Use it as a context manager or call :meth:`start`/:meth:`stop`. Point litellm at it with
    model ``openai/<name>`` and ``api_base=server.url``.
    """

    def __init__(
        self,
        script: Script | Mapping[str, Any] | str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        latency: float = 0.0,
    ) -> None:
        self._state = _State(script=load_script(script or {}), latency=latency)
        self._host = host
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> FakeOpenAIServer:
        if self._server is not None:
            return self
        server = _Server((self._host, self._port), _Handler)
        server.state = self._state
        self._state.stopping.clear()
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-openai-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; hanging and stalled replies are released and their connections close."""
        server, self._server = self._server, None
        if server is None:
            return
        self._state.stopping.set()
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ----------------------------------------------------------------- configuration

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the fake server is not running; call start() first")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The ``api_base`` to give litellm: ``http://HOST:PORT/v1``."""
        return f"http://{self._host}:{self.port}/v1"

    @property
    def script(self) -> Script:
        return self._state.script

    def set_script(self, script: Script | Mapping[str, Any] | str | Path) -> None:
        """Replace the script and forget how often each rule was used."""
        new = load_script(script)
        with self._state.lock:
            self._state.script = new
            self._state.used.clear()

    @property
    def latency(self) -> float:
        return self._state.latency

    @latency.setter
    def latency(self, seconds: float) -> None:
        """Default delay before the first byte of every reply without its own ``latency``."""
        if seconds < 0:
            raise ValueError("latency must be >= 0")
        self._state.latency = seconds

    # ----------------------------------------------------------------- observations

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order (a copy)."""
        with self._state.lock:
            return list(self._state.requests)

    def requests_for(self, model: str) -> Iterator[RecordedRequest]:
        name = model.removeprefix("openai/")
        return (r for r in self.requests if r.model.removeprefix("openai/") == name)

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait until every received request is fully answered; False if ``timeout`` ran out.

        A client can read the last byte a moment before the handler records ``finished_at``.
        """
        deadline = time.monotonic() + timeout
        while any(r.finished_at is None for r in self.requests):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True

    def clear_requests(self) -> None:
        with self._state.lock:
            self._state.requests.clear()

"""The scripted OpenAI-compatible server, spoken to over real HTTP (no litellm here)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forge_ledger.errors import ConfigError
from forge_ledger.testing import (
    FakeOpenAIServer,
    Script,
    ScriptError,
    bundled_script,
    load_script,
    split_chunks,
)


def _post(
    server: FakeOpenAIServer, body: dict[str, Any], path: str = "/v1/chat/completions",
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def _body(model: str, text: str = "hello there", *, stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": text},
        ],
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _events(raw: bytes) -> list[Any]:
    out: list[Any] = []
    for block in raw.decode().split("\n\n"):
        if block.startswith("data: "):
            payload = block[len("data: ") :]
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


def test_non_streaming_reply_with_deterministic_usage(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_script({"alice": "four words of text"})
    status, _, raw = _post(fake_openai, _body("alice", "one two three"))
    doc = json.loads(raw)
    assert status == 200
    assert doc["choices"][0]["message"]["content"] == "four words of text"
    assert doc["choices"][0]["finish_reason"] == "stop"
    # prompt = "be brief" (2) + "one two three" (3); completion = 4 words
    assert doc["usage"] == {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}


def test_sse_stream_has_content_finish_usage_then_done(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_script({"alice": "alpha beta gamma"})
    status, headers, raw = _post(fake_openai, _body("alice", stream=True))
    assert status == 200
    assert headers["content-type"] == "text/event-stream"
    events = _events(raw)
    assert events[-1] == "[DONE]"
    usage_chunk, finish_chunk = events[-2], events[-3]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 3
    assert finish_chunk["choices"][0]["finish_reason"] == "stop"
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events[:-3])
    assert text == "alpha beta gamma"
    assert len(events[:-3]) >= 4  # role chunk + one chunk per word


def test_stream_without_include_usage_has_no_usage_chunk(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_script({"alice": "x y"})
    body = _body("alice", stream=True)
    del body["stream_options"]
    _, _, raw = _post(fake_openai, body)
    assert not any(isinstance(e, dict) and "usage" in e for e in _events(raw))


def test_rules_match_in_order_and_respect_times(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_script(
        {
            "bob": [
                {"match": "· critique ·", "content": "critique reply"},
                {"content": "first", "times": 1},
                {"content": "later"},
            ],
        },
    )
    replies = [
        json.loads(_post(fake_openai, _body("bob", t))[2])["choices"][0]["message"]["content"]
        for t in ("Round 1 · draft · iteration 1", "Round 2 · critique · iteration 1", "x", "y")
    ]
    assert replies == ["first", "critique reply", "later", "later"]
    assert [r.rule_index for r in fake_openai.requests] == [1, 0, 2, 2]


def test_wildcard_model_and_openai_prefix(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_script({"openai/carol": "from carol", "*": "from anyone"})
    assert b"from carol" in _post(fake_openai, _body("carol"))[2]
    assert b"from anyone" in _post(fake_openai, _body("dave"))[2]


def test_unscripted_model_is_a_clear_400(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_script({"alice": [{"content": "once", "times": 1}]})
    _post(fake_openai, _body("alice"))
    status, _, raw = _post(fake_openai, _body("alice"))
    assert status == 400
    assert "no scripted reply left for model 'alice'" in json.loads(raw)["error"]["message"]
    assert _post(fake_openai, _body("zed"))[0] == 400


@pytest.mark.parametrize(
    ("fault", "status"),
    [("rate_limit", 429), ("server_error", 500), ("unavailable", 503), ("unauthorized", 401)],
)
def test_http_faults(fake_openai: FakeOpenAIServer, fault: str, status: int) -> None:
    fake_openai.set_script({"m": [{"fault": fault, "retry_after": 7}]})
    got, headers, raw = _post(fake_openai, _body("m"))
    assert got == status
    assert "message" in json.loads(raw)["error"]
    assert (headers.get("retry-after") == "7") is (fault == "rate_limit")


def test_empty_fault_is_a_200_without_body(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_script({"m": [{"fault": "empty"}]})
    status, _, raw = _post(fake_openai, _body("m", stream=True))
    assert (status, raw) == (200, b"")


def test_no_finish_streams_content_but_no_finish_or_usage(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_script({"m": [{"fault": "no_finish", "content": "a b c"}]})
    events = _events(_post(fake_openai, _body("m", stream=True))[2])
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks)
    assert not any("usage" in c for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "a b c"


def test_disconnect_leaves_chunked_body_incomplete(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_script({"m": [{"fault": "disconnect", "content": "one two three four"}]})
    with pytest.raises(http.client.IncompleteRead) as info:
        _post(fake_openai, _body("m", stream=True))
    partial = info.value.partial.decode()
    assert "one " in partial
    assert "four" not in partial


def test_malformed_chunk_is_not_json(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_script({"m": [{"fault": "malformed_chunk", "content": "one two three four"}]})
    _, _, raw = _post(fake_openai, _body("m", stream=True))
    with pytest.raises(json.JSONDecodeError):
        _events(raw)
    assert b"[DONE]" not in raw


def test_hang_is_released_when_the_server_stops() -> None:
    server = FakeOpenAIServer({"m": [{"fault": "hang"}]}).start()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=0.3)
    conn.request("POST", "/v1/chat/completions", json.dumps(_body("m")))
    with pytest.raises(TimeoutError):
        conn.getresponse()
    conn.close()
    assert server.requests[0].finished_at is None
    server.stop()
    assert server.wait_idle(timeout=5)


def test_models_endpoint_and_unknown_routes(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_script({"b": "x", "a": "y"})
    conn = http.client.HTTPConnection("127.0.0.1", fake_openai.port, timeout=5)
    conn.request("GET", "/v1/models")
    doc = json.loads(conn.getresponse().read())
    conn.close()
    assert [m["id"] for m in doc["data"]] == ["a", "b"]
    assert _post(fake_openai, _body("a"), path="/chat/completions")[0] == 200
    assert _post(fake_openai, _body("a"), path="/v1/embeddings")[0] == 404


def test_requests_are_recorded(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_script({"m": "ok"})
    _post(fake_openai, _body("m", "Round 4 · synthesis · iteration 2", stream=True))
    assert fake_openai.wait_idle()
    (rec,) = fake_openai.requests
    assert rec.model == "m"
    assert rec.stream
    assert rec.last_user_message == "Round 4 · synthesis · iteration 2"
    assert rec.finished_at is not None
    assert rec.finished_at >= rec.received_at
    assert list(fake_openai.requests_for("openai/m")) == [rec]
    fake_openai.clear_requests()
    assert fake_openai.requests == []


def test_default_latency_is_applied_before_first_byte(fake_openai: FakeOpenAIServer) -> None:
    fake_openai.set_script({"m": "ok", "fast": [{"content": "ok", "latency": 0}]})
    fake_openai.latency = 0.2
    _post(fake_openai, _body("m"))
    _post(fake_openai, _body("fast"))
    assert fake_openai.wait_idle()
    slow, fast = fake_openai.requests
    assert slow.finished_at is not None
    assert fast.finished_at is not None
    assert slow.finished_at - slow.received_at >= 0.2
    with pytest.raises(ValueError, match="latency"):
        fake_openai.latency = -1


# --------------------------------------------------------------------------- scripts


def test_script_validation_errors_are_one_line() -> None:
    with pytest.raises(ScriptError) as info:
        Script.from_mapping({"m": [{"fault": "explode"}]})
    assert isinstance(info.value, ConfigError)
    line = info.value.one_line()
    assert "m.0.fault" in line
    assert "\n" not in line
    with pytest.raises(ScriptError, match="invalid regex"):
        Script.from_mapping({"m": [{"match": "(unclosed"}]})
    with pytest.raises(ScriptError, match="times"):
        Script.from_mapping({"m": [{"content": "x", "times": 0}]})


def test_script_files(tmp_path: Path) -> None:
    good = tmp_path / "s.yaml"
    good.write_text("alice:\n  - match: '· draft ·'\n    content: hi\n  - bye\n")
    script = load_script(good)
    assert [r.content for r in script.models["alice"]] == ["hi", "bye"]
    as_json = tmp_path / "s.json"
    as_json.write_text(json.dumps({"models": {"bob": [{"content": "x", "latency": 0.5}]}}))
    assert load_script(as_json).models["bob"][0].latency == 0.5
    bad = tmp_path / "bad.yaml"
    bad.write_text("alice: [unclosed\n")
    with pytest.raises(ScriptError, match="not valid YAML"):
        load_script(bad)
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ScriptError, match="must be a mapping"):
        load_script(tmp_path / "list.yaml")
    with pytest.raises(ScriptError, match="not found"):
        load_script(tmp_path / "missing.yaml")


def test_bundled_demo_script_answers_every_round_kind() -> None:
    script = bundled_script("demo")
    rules = script.rules_for("openai/anyone")
    assert rules is not None
    for kind in ("draft", "critique", "response", "synthesis", "refinement", "convergence"):
        first = f"Round 3 · {kind} · iteration 1"
        rule = next(r for r in rules if r.matches(first))
        assert rule.content.strip()
        if kind in ("critique", "response", "refinement", "convergence"):
            assert "{" in rule.content  # structured rounds answer with JSON


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=200))
def test_split_chunks_loses_nothing_but_leading_space(text: str) -> None:
    assert "".join(split_chunks(text)).strip() == text.strip()
    assert "".join(split_chunks(text)).split() == text.split()


# --------------------------------------------------------------------------- CLI


def _cli(*args: str, **kw: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "forge_ledger", "fake-server", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        **kw,
    )


def test_cli_fake_server_serves_until_interrupted(tmp_path: Path) -> None:
    script = tmp_path / "s.yaml"
    script.write_text("alice: hello from the cli\n")
    proc = _cli("--port", "0", "--script", str(script), "--latency", "0")
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        assert url.endswith("/v1")
        host, port = url.removeprefix("http://").removesuffix("/v1").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        conn.request("POST", "/v1/chat/completions", json.dumps(_body("alice")))
        doc = json.loads(conn.getresponse().read())
        conn.close()
        assert doc["choices"][0]["message"]["content"] == "hello from the cli"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_bad_script_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("alice:\n  - fault: explode\n")
    proc = _cli("--script", str(bad))
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: invalid fake-server script")
    proc = _cli("--script", str(tmp_path / "nope.yaml"))
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert "not found" in err
    assert "Traceback" not in err


def test_cli_module_does_not_import_litellm() -> None:
    code = (
        "import sys, forge_ledger.cli, forge_ledger.cli.fake_server, forge_ledger.testing, "
        "forge_ledger.providers; print('litellm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

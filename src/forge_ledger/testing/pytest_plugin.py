"""pytest fixtures for the fake OpenAI-compatible server.

Enable with ``pytest_plugins = ["forge_ledger.testing.pytest_plugin"]`` in a conftest.
``fake_openai`` is a running server with an empty script (call ``set_script`` in the test);
``fake_openai_factory`` starts more servers, each stopped at teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from ._script import Script
from ._server import FakeOpenAIServer

__all__ = ["fake_openai", "fake_openai_factory"]

ServerFactory = Callable[..., FakeOpenAIServer]


@pytest.fixture
def fake_openai_factory() -> Iterator[ServerFactory]:
    """``factory(script=None, *, latency=0.0) -> FakeOpenAIServer`` (started)."""
    servers: list[FakeOpenAIServer] = []

    def make(
        script: Script | Mapping[str, Any] | str | Path | None = None, *, latency: float = 0.0
    ) -> FakeOpenAIServer:
        server = FakeOpenAIServer(script, latency=latency).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def fake_openai(fake_openai_factory: ServerFactory) -> FakeOpenAIServer:
    """A running fake server on 127.0.0.1 with an empty script."""
    return fake_openai_factory()

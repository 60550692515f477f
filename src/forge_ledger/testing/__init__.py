"""Test doubles shipped with forge-ledger.

- :class:`SessionBuilder`: real sessions built by the aggregate's commands, for read-side tests.
- :class:`ScriptedProvider`: an in-process provider answering from a queue, for tests whose
  subject is not HTTP.
- :class:`FakeOpenAIServer`: a scripted OpenAI-compatible server on 127.0.0.1, for the provider,
  fault and CLI tests, ``forge-ledger fake-server`` and the offline demo.

Importing this package never imports litellm.
"""

from ._builder import SessionBuilder, SessionStoreLike
from ._script import (
    Fault,
    ReplyRule,
    Script,
    ScriptError,
    bundled_script,
    bundled_script_names,
    load_script,
)
from ._scripted import ScriptedAnswer, ScriptedProvider
from ._server import FakeOpenAIServer, RecordedRequest, split_chunks, word_count

__all__ = [
    "FakeOpenAIServer",
    "Fault",
    "RecordedRequest",
    "ReplyRule",
    "Script",
    "ScriptError",
    "ScriptedAnswer",
    "ScriptedProvider",
    "SessionBuilder",
    "SessionStoreLike",
    "bundled_script",
    "bundled_script_names",
    "load_script",
    "split_chunks",
    "word_count",
]

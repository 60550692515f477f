"""Test doubles shipped with forge-ledger: a scripted OpenAI-compatible server on 127.0.0.1.

Used by the test-suite, by ``forge-ledger fake-server`` and by the offline demo. Importing
this package never imports litellm.
"""

from ._script import (
    Fault,
    ReplyRule,
    Script,
    ScriptError,
    bundled_script,
    bundled_script_names,
    load_script,
)
from ._server import FakeOpenAIServer, RecordedRequest, split_chunks, word_count

__all__ = [
    "FakeOpenAIServer",
    "Fault",
    "RecordedRequest",
    "ReplyRule",
    "Script",
    "ScriptError",
    "bundled_script",
    "bundled_script_names",
    "load_script",
    "split_chunks",
    "word_count",
]

"""A text stream that stands in for ``sys.stdout`` or ``sys.stderr`` and passes writes on.

What every such stand-in shares (the real stream's descriptor and encoding, whether it is a
terminal, that it is writable) lives here once, so each stand-in says only what it does to a
write: drop it once the reader went away (:class:`~._interrupt.QuietWhenClosed`), or escape it
for a terminal (``_common.document_output``). Imports nothing of ours, so the start-up path
may load it.
"""

from __future__ import annotations

import io
from typing import Any, TextIO

__all__ = ["ForwardingStream"]


class ForwardingStream(io.TextIOBase):
    """Writes go to ``target`` unchanged; a subclass changes :meth:`write`."""

    def __init__(self, target: TextIO) -> None:
        self._target = target

    def write(self, text: str) -> int:
        self._target.write(text)
        return len(text)

    def flush(self) -> None:
        self._target.flush()

    def isatty(self) -> bool:
        return self._target.isatty()

    def fileno(self) -> int:
        return self._target.fileno()

    @property
    def encoding(self) -> Any:  # type: ignore[override]
        return getattr(self._target, "encoding", "utf-8")

    def writable(self) -> bool:
        return True

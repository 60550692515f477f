"""A TCP proxy on 127.0.0.1 that a test can cut, as a network or a database server goes away.

:class:`CuttableProxy` forwards every connection made to its port to ``target`` (threads, one
pair per connection). :meth:`CuttableProxy.cut` closes every forwarded connection at once and
stops listening, so a reconnect is refused; the program on the near side sees exactly what it
would see if the server's machine fell off the network and came back refusing connections.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType

__all__ = ["CuttableProxy"]

_CHUNK = 65536


class CuttableProxy:
    """Forward 127.0.0.1:``port`` to ``target`` until :meth:`cut`."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._cut = False
        self.accepted = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def __enter__(self) -> CuttableProxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.cut()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self._listener.accept()
            except OSError:  # the listener was closed: cut
                return
            try:
                far = socket.create_connection(self.target, timeout=10)
            except OSError:
                near.close()
                continue
            with self._lock:
                if self._cut:
                    near.close()
                    far.close()
                    return
                self.accepted += 1
                self._open.update((near, far))
            for a, b in ((near, far), (far, near)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(_CHUNK):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._close(src, dst)

    def _close(self, *socks: socket.socket) -> None:
        with self._lock:
            for s in socks:
                self._open.discard(s)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    @property
    def connections(self) -> int:
        """Connections forwarded now (each counts its two sockets once)."""
        with self._lock:
            return len(self._open) // 2

    def cut(self) -> None:
        """Drop every forwarded connection and refuse new ones (idempotent)."""
        with self._lock:
            self._cut = True
            socks = list(self._open)
        with contextlib.suppress(OSError):  # wakes the accepting thread
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._close(*socks)

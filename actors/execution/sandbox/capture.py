"""A sandboxed command's output, read as it comes: streamed to a log file that stops growing at its
cap, and kept in memory only as a head and a tail. However much the command prints, the caller
holds at most `kept` bytes of it, and the disk at most `log_cap`."""
from __future__ import annotations

import os
import threading

CHUNK = 1 << 16


def size_text(count: int) -> str:
    """1536 -> "1.5 KiB", 64 * 2**20 -> "64 MiB": how limits read in reports."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            value = count / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{count} bytes"


class OutputCapture:
    """Reads `fd` to its end in a thread of its own (call `start`, then `finish` once the writers
    are gone)."""

    def __init__(self, fd: int, log_path: str | os.PathLike | None, log_cap: int, kept: int) -> None:
        self._fd = fd
        self._log = open(log_path, "wb") if log_path is not None else None
        self._log_cap = log_cap
        self._half = max(kept // 2, 1)
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0
        self.logged = 0
        self._thread = threading.Thread(target=self._read, name="sandbox-output", daemon=True)

    def start(self) -> OutputCapture:
        self._thread.start()
        return self

    def _read(self) -> None:
        try:
            while True:
                chunk = os.read(self._fd, CHUNK)
                if not chunk:
                    return
                self._take(chunk)
        except OSError:  # the descriptor was closed under us by finish(): the end
            return

    def _take(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if self._log is not None and self.logged < self._log_cap:
            part = chunk[: self._log_cap - self.logged]
            self._log.write(part)
            self.logged += len(part)
        room = self._half - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail += chunk
            if len(self._tail) > 2 * self._half:  # trimmed now and then, not at every chunk
                del self._tail[: len(self._tail) - self._half]

    def finish(self, grace_s: float = 5.0) -> None:
        """Wait for the end of the output; a writer that outlived its sandbox (only possible without
        one) is cut off after `grace_s`."""
        self._thread.join(grace_s)
        if self._thread.is_alive():
            os.close(self._fd)
            self._thread.join()
        else:
            os.close(self._fd)
        if self._log is not None:
            self._log.close()

    @property
    def cut_bytes(self) -> int:
        """What the head and the tail leave out."""
        return max(self.total - len(self._head) - min(len(self._tail), self._half), 0)

    def text(self) -> str:
        """The head and the tail, with what was left out said between them."""
        tail = bytes(self._tail[-self._half:]) if self._tail else b""
        if not self.cut_bytes:
            data = bytes(self._head) + tail
            return data.decode("utf-8", "replace")
        return (bytes(self._head).decode("utf-8", "replace") + f"\n... [{size_text(self.cut_bytes)} of output cut] ...\n"
                + tail.decode("utf-8", "replace"))

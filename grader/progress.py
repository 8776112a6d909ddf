"""A dependency-free progress bar for batch grading (stderr; one line per job when not a terminal)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, total: int, *, enabled: bool = True, stream: TextIO | None = None, width: int = 30):
        self.total = max(total, 0)
        self.done = 0
        self.counts: dict[str, int] = {}
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.width = width
        self.start = time.perf_counter()
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        if enabled:
            self._draw("")

    def _line(self, last: str) -> str:
        frac = self.done / self.total if self.total else 1.0
        filled = int(self.width * frac)
        elapsed = time.perf_counter() - self.start
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        counts = " ".join(f"{k}={v}" for k, v in sorted(self.counts.items()))
        return (
            f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} {counts} "
            f"elapsed {elapsed:.0f}s eta {eta:.0f}s {last}"
        ).rstrip()

    def _draw(self, last: str) -> None:
        if self.tty:
            self.stream.write("\r\033[K" + self._line(last))
        elif last:
            self.stream.write(self._line(last) + "\n")
        self.stream.flush()

    def note(self, event: str, label: str = "") -> None:
        """Count an event that does not finish a job (e.g. 'retried') and show it on the progress line."""
        self.counts[event] = self.counts.get(event, 0) + 1
        if self.enabled:
            self._draw(f"{label}: {event}" if label else event)

    def update(self, status: str, label: str = "") -> None:
        self.done += 1
        self.counts[status] = self.counts.get(status, 0) + 1
        if self.enabled:
            self._draw(f"{label}: {status}" if label else status)

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\n")
            self.stream.flush()

"""Buffered metrics logging, with a lock so that helper threads may log too."""

from __future__ import annotations

import threading


class MetricsLogger:
    def __init__(self, capacity: int = 8) -> None:
        self._lock = threading.Lock()
        self._buffer: list[str] = []
        self.capacity = capacity
        self.flushed = 0

    def log(self, line: str) -> None:
        with self._lock:
            self._buffer.append(line)
            if len(self._buffer) >= self.capacity:
                self._flush()

    def _flush(self) -> None:
        """Write the buffered lines out; also called at exit."""
        with self._lock:  # CULPRIT
            self.flushed += len(self._buffer)
            self._buffer.clear()

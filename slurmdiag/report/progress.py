"""The live line of ``slurmdiag attach`` on a terminal: elapsed time against the deadline, nodes
answered out of expected, and the phase. Redrawn in place (``\\r``) by a small thread so the clock
moves while srun is silent; cleared before the summary is printed. The CLI uses it only when
stderr is a terminal and ``--json`` is not given."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from typing_extensions import Self

REDRAW_S = 0.25


class LiveProgress:
    def __init__(
        self,
        stream: TextIO,
        deadline_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        redraw_s: float = REDRAW_S,
    ) -> None:
        self.stream = stream
        self.deadline_s = deadline_s
        self.clock = clock
        self.started = clock()
        self.phase_name = "finding the job"
        self.answered = 0
        self.expected: int | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._width = 0
        self._thread = threading.Thread(
            target=self._run, args=(redraw_s,), name="slurmdiag-progress", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def line(self) -> str:
        elapsed = self.clock() - self.started
        nodes = ""
        if self.expected is not None:
            nodes = f", nodes answered {self.answered}/{self.expected}"
        return f"slurmdiag: {elapsed:4.1f}s / {self.deadline_s:g}s, {self.phase_name}{nodes}"

    def phase(self, name: str, expected: int | None = None) -> None:
        with self._lock:
            self.phase_name = name
            if expected is not None:
                self.expected = expected
        self.draw()

    def nodes(self, done: int, total: int) -> None:
        with self._lock:
            self.answered, self.expected = done, total
        self.draw()

    def draw(self) -> None:
        with self._lock:
            if self._stop.is_set():
                return
            text = self.line()
            pad = " " * max(0, self._width - len(text))
            self._width = len(text)
            self.stream.write(f"\r{text}{pad}")
            self.stream.flush()

    def close(self) -> None:
        """Stop redrawing and clear the line, so what follows starts on a clean line."""
        with self._lock:
            if self._stop.is_set():
                return
            self._stop.set()
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(1.0)

    def _run(self, redraw_s: float) -> None:
        while not self._stop.wait(redraw_s):
            self.draw()

"""The live progress line, drawn into a buffer with a stepped clock."""

from __future__ import annotations

import io

from slurmdiag.report.progress import LiveProgress


def test_line_shows_elapsed_against_deadline_phase_and_nodes_then_clears():
    now = [100.0]
    out = io.StringIO()
    live = LiveProgress(out, 30.0, clock=lambda: now[0], redraw_s=60.0)
    live.phase("collecting through srun", 4)
    now[0] = 102.5
    live.nodes(3, 4)
    assert live.line() == "slurmdiag:  2.5s / 30s, collecting through srun, nodes answered 3/4"
    live.close()
    frames = out.getvalue().split("\r")
    assert "slurmdiag:  0.0s / 30s, collecting through srun, nodes answered 0/4" in frames
    assert frames[-1] == "" and frames[-2].strip() == ""  # cleared: the summary starts clean
    live.draw()  # nothing after close
    assert out.getvalue().split("\r")[-1] == ""

"""A rank stopped at a debugger's prompt (a breakpoint() left in the code) is said so, with
what to do; a program merely run under pdb is not."""

from __future__ import annotations

from dataclasses import replace

from snapfactory import map_rank, recorded

from slurmdiag.analysis import analyze


def test_a_rank_stopped_at_a_pdb_prompt_is_said_so():
    verdict = analyze(recorded("breakpoint_left_in.samples1")).verdicts[0]
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (1,)
    assert "rank 1 is stopped at a pdb prompt at " in verdict.summary
    assert verdict.sites[0].endswith("breakpoint_left_in.py:33")
    assert verdict.next_step.startswith("a breakpoint() or pdb.set_trace() left in the code")


def test_a_program_run_under_pdb_is_not_stopped_by_it():
    # GIVEN the same rank, its prompt's frames moved below its own (`python -m pdb train.py`,
    # blocked in a read of its own): pdb runs it, no prompt is open
    def under_pdb(r):  # type: ignore[no-untyped-def]
        def moved(t):  # type: ignore[no-untyped-def]
            debugger = [f for f in t.frames if not f.native and f.file.endswith(("/pdb.py",
                                                                                  "/bdb.py",
                                                                                  "/cmd.py"))]
            rest = [f for f in t.frames if f not in debugger]
            return replace(t, frames=(*rest, *debugger))
        return replace(r, samples=tuple(replace(x, threads=tuple(
            moved(t) if t.os_thread_id == r.pid else t for t in x.threads)) for x in r.samples))

    verdict = analyze(map_rank(recorded("breakpoint_left_in.samples1"), 1, under_pdb)).verdicts[0]
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (1,)
    assert "pdb" not in verdict.summary and "breakpoint" not in verdict.next_step

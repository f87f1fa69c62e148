"""torch.compile's warm-up: rank 0 compiles while ranks 1-3 wait in the first gradient
all_reduce (`healthy_compile_warmup`, real looks). Both were false alarms:

- one sample: its main thread in Future.result() for a thread pool whose threads wait in
  Popen.communicate for g++, whose cc1plus computes: "rank 0 is waiting for another thread at
  /tmp/torchinductor_root/7r/c7rez....py:101", a warning, its site a module torch.compile wrote;
- the defaults: Dynamo tracing and Inductor generating code, Python holding the GIL in every
  sample: "rank 0 is busy in its own code", spinning, critical."""

from __future__ import annotations

from dataclasses import replace

from snapfactory import map_rank, recorded

from slurmdiag.analysis import diagnose
from slurmdiag.analysis.stacks import is_user_file, library_path
from slurmdiag.analysis.verdicts import COMPILE_FILES
from slurmdiag.snapshot import Rank

WARMUP = "healthy_compile_warmup.samples1"
DEFAULTS = "healthy_compile_warmup.default"


def test_a_rank_compiling_through_its_threads_children_is_slow_not_hung() -> None:
    snapshot = recorded(WARMUP)
    rank0 = next(r for _, r in snapshot.all_ranks() if r.rank == 0)
    assert any(w.cmdline[0].endswith("cc1plus") and (w.state or "").startswith("R")
               for w in rank0.workers)
    verdict = diagnose(snapshot).verdicts[0]
    # THEN a compile that cannot be told from a hang, rank 0 named at the job's own line (the
    # evaluation it compiles)
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == ("slow_step", "info", (0,))
    assert verdict.summary.startswith("a torch.compile compile or a hang, cannot tell: rank 0 "
                                      "compiles with torch.compile at ")
    assert verdict.sites == (
        "/work/main/tests/scenarios/healthy_compile_warmup.py:36",), verdict.sites
    # AND without the compiler's frames (a thread pool running g++ for the job's own code),
    # a rank waiting for children that compute is a slow child process, not a straggler
    other = diagnose(map_rank(snapshot, 0, _without_compiler)).verdicts[0]
    assert (other.kind, other.severity) == ("slow_step", "info"), other.summary
    assert "waits for its child processes, which compute" in other.summary


def test_a_rank_tracing_and_generating_code_is_compiling_not_spinning() -> None:
    # GIVEN three samples of rank 0 in Dynamo's tracing and Inductor's code generation, on a
    # CPU and holding the GIL
    verdict = diagnose(recorded(DEFAULTS)).verdicts[0]
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == ("slow_step", "info", (0,))
    assert "torch.compile" in verdict.summary and "TORCH_LOGS=recompiles" in verdict.next_step
    # AND its liar: the same rank busy with no compiler frame (a loop of its own, or compiled
    # code that runs: eval_frame's frames only) spins
    spinning = diagnose(map_rank(recorded(DEFAULTS), 0, _without_compiler)).verdicts[0]
    assert (spinning.kind, spinning.severity) == ("spinning", "critical"), spinning.summary


def _without_compiler(rank: Rank) -> Rank:
    return replace(rank, samples=tuple(replace(s, threads=tuple(
        replace(t, frames=tuple(f for f in t.frames if not f.file.endswith(COMPILE_FILES)))
        for t in s.threads)) for s in rank.samples))


def _children_idle(rank: Rank) -> Rank:
    return replace(rank, workers=tuple(replace(w, state="S", cpu_percent=0.0)
                                       for w in rank.workers))


def _no_thread_in_popen(rank: Rank) -> Rank:
    samples = tuple(replace(s, threads=tuple(
        t for t in s.threads if not any(f.file.endswith("/subprocess.py") for f in t.frames)))
        for s in rank.samples)
    return replace(rank, samples=samples)


def test_its_liars_stay_a_straggler() -> None:
    # GIVEN the same look with the compiler's processes idle (a compile worker that hangs), or
    # with no thread of the rank waiting for a child (the children work for something else)
    for change in (_children_idle, lambda r: _no_thread_in_popen(_without_compiler(r))):
        verdict = diagnose(map_rank(recorded(WARMUP), 0, change)).verdicts[0]
        # THEN rank 0 stays blocked: a warning, not a slow phase
        assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == (
            "straggler", "warning", (0,)), (change.__name__, verdict.summary)


def test_torch_compiles_generated_modules_are_torchs_code() -> None:
    path = "/tmp/torchinductor_root/7r/c7rezpfr7plzromjmghbt2iiowmsv4u27ws25j3am527fi2uy4yd.py"
    assert not is_user_file(path)
    assert library_path(path).startswith("torchinductor_root/7r/")
    # (a directory of the job's own that only contains the word stays the job's)
    assert is_user_file("/home/u/my_torchinductor_notes/train.py")

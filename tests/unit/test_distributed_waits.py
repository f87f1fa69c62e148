"""A thread idle in torch.distributed's own code, below no collective of the c10d API: the
blocking call (a Work's or a Future's wait, a store's get) has no Python frame, so the stack's
innermost frame is torch's (`zero_optimizer_straggler`, recorded by `make accuracy`: the ranks
that waited in ZeroRedundancyOptimizer._sync_params for a straggler's broadcast were "blocked
on a lock, outside any collective", and all four ranks were blamed)."""

from __future__ import annotations

from snapfactory import recorded

from slurmdiag.analysis import diagnose
from slurmdiag.analysis.stacks import StackTable
from slurmdiag.snapshot import Frame

SITE = "/venv/lib/python3.11/site-packages/"
ZERO = SITE + "torch/distributed/optim/zero_redundancy_optimizer.py"
USER = "/home/u/train.py"


def _info(*frames: Frame):
    table = StackTable()
    return table[table.add(frames)]


def test_ranks_waiting_in_zeros_parameter_broadcast_wait_on_the_straggler() -> None:
    verdict = diagnose(recorded("zero_optimizer_straggler.default")).verdicts[0]
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (2,)
    assert "while ranks 0-1,3 wait in _sync_params at" in verdict.summary


def test_an_innermost_torch_distributed_frame_is_a_wait_on_a_peer() -> None:
    comprehension = Frame(file=ZERO, line=826,
                          function="ZeroRedundancyOptimizer._sync_params.<locals>.<listcomp>")
    sync = Frame(file=ZERO, line=826, function="ZeroRedundancyOptimizer._sync_params")
    step = Frame(file=ZERO, line=1151, function="ZeroRedundancyOptimizer.step")
    main = Frame(file=USER, line=65, function="train")
    info = _info(comprehension, sync, step, main)
    # THEN it waits in a collective named by the function (its comprehension's, its own)
    assert info.kind == "collective" and info.op == "_sync_params"
    # AND so it does with C frames above it (--native)
    native = Frame(file="libtorch_cpu.so", line=None, function="c10d::ProcessGroupGloo::Work",
                   native=True)
    assert _info(native, comprehension, sync, step, main).kind == "collective"


def test_torch_distributed_code_that_calls_on_is_no_wait_of_its_own() -> None:
    sync = Frame(file=ZERO, line=826, function="ZeroRedundancyOptimizer._sync_params")
    main = Frame(file=USER, line=65, function="train")
    # GIVEN torch.distributed's frame below a frame of the stdlib (a lock it takes) or of the
    # job's code (a hook it calls): THEN the frame above decides, as before
    lock = Frame(file="/usr/lib/python3.11/threading.py", line=320, function="Condition.wait")
    assert _info(lock, sync, main).kind == "lock"
    hook = Frame(file=USER, line=12, function="on_params_synced")
    assert _info(hook, sync, main).kind == "user"
    # AND torchrun's agent idle in its monitor loop is no peer wait
    agent = Frame(file=SITE + "torch/distributed/elastic/agent/server/api.py", line=900,
                  function="SimpleElasticAgent._invoke_run")
    assert _info(agent, main).kind != "collective"

"""A per-node monitor started as a step of its own beside the training (`node_monitor_step`,
recorded by `make accuracy` before the change): its processes carry that step's SLURM_PROCID,
0 and 1, the training ranks' numbers. Started first, the monitor's pid came first and it stood
for rank 0: the verdict blamed rank 0 "in time.sleep" at the monitor's line. The step whose
processes show a rank's signs holds the ranks; the monitor is one of the nodes' other processes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from snapfactory import recorded

from slurmdiag.analysis import diagnose
from slurmdiag.analysis.steps import NOT_A_RANK, RANK_ENV, _world_key, one_world, ranks_step, worlds
from slurmdiag.snapshot import Frame, Rank, Sample, Snapshot, ThreadStack

MONITOR = "_node_monitor.py"


def _is_monitor(rank: Rank) -> bool:
    return any(MONITOR in arg for arg in rank.cmdline)


def _steps(snapshot: Snapshot) -> tuple[str | None, str | None]:
    """(the training's step, the monitor's step) of a recording (the monitor's came first)."""
    ranks = [r for n in snapshot.nodes for r in n.ranks]
    return (next(r.step_id for r in ranks if not _is_monitor(r)),
            next(r.step_id for r in ranks if _is_monitor(r)))


def _map(snapshot: Snapshot, which, change) -> Snapshot:  # type: ignore[no-untyped-def]
    return replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(change(r) if which(r) else r for r in n.ranks))
        for n in snapshot.nodes))


def _without_signs(rank: Rank) -> Rank:
    """The rank as if it had not reached torch.distributed yet: its own frames only, no
    launcher's variables, no connection to its peers."""
    samples = tuple(replace(s, threads=tuple(
        replace(t, frames=tuple(f for f in t.frames if "/torch/" not in f.file))
        for t in s.threads)) for s in rank.samples)
    env = {k: v for k, v in rank.env.items() if k not in RANK_ENV}
    return replace(rank, samples=samples, env=env, connections=())


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_the_monitors_step_is_set_apart_and_the_culprit_is_the_training_rank(mode: str) -> None:
    snapshot = recorded(f"node_monitor_step.{mode}")
    # the recording as the collector made it: the monitors among the ranks, claiming 0 and 1
    claimed = sorted(r.rank for n in snapshot.nodes for r in n.ranks if _is_monitor(r))
    assert claimed == [0, 1]
    training_step, monitor_step = _steps(snapshot)
    assert monitor_step == "0"  # started first: the pids of its processes came first too
    analysis = diagnose(snapshot)
    v = analysis.verdicts[0]
    assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (0,)), v
    assert v.sites[0].endswith("rank_gated_collective.py:38")
    assert not any(MONITOR in s for s in v.sites)
    assert any(f"(step(s) {monitor_step}: {MONITOR})" in note for note in analysis.notes), analysis.notes
    assert training_step != monitor_step
    apart = one_world(snapshot)
    moved = [p for n in apart.nodes for p in n.other_processes if p.role == NOT_A_RANK]
    assert [(p.step_id, MONITOR in " ".join(p.cmdline)) for p in moved] == [(monitor_step, True)] * 2
    assert moved[0].samples  # their stacks go with them, for the report
    assert not any(_is_monitor(r) for n in apart.nodes for r in n.ranks)
    assert one_world(apart) == apart


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_a_monitor_the_batch_script_starts_beside_torchrun_is_no_rank_0(mode: str) -> None:
    # batch_monitor_background: `python _node_monitor.py &` then `torchrun --standalone` in
    # the batch script: the monitor is in the ranks' own step (batch) with SLURM_PROCID 0
    snapshot = recorded(f"batch_monitor_background.{mode}")
    zeros = [r for n in snapshot.nodes for r in n.ranks if r.rank == 0]
    assert [(_is_monitor(r), r.step_id) for r in zeros] == [(True, "batch"), (False, "batch")]
    assert ranks_step(snapshot.nodes) == (None, ())  # one step: the processes tell
    analysis = diagnose(snapshot)
    v = analysis.verdicts[0]
    assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (0,)), v
    assert v.sites[0].endswith("rank_gated_collective.py:38")
    assert any(f"(step(s) batch: {MONITOR})" in note for note in analysis.notes), analysis.notes
    apart = one_world(snapshot)
    assert [p.pid for n in apart.nodes for p in n.other_processes
            if p.role == NOT_A_RANK] == [zeros[0].pid]


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_a_batch_script_written_in_python_is_no_rank_0(mode: str) -> None:
    # python_batch_script: the batch step's Python process runs the training's srun and
    # waits in subprocess.run; it was blamed as rank 0
    snapshot = recorded(f"python_batch_script.{mode}")
    driver = [r for n in snapshot.nodes for r in n.ranks if "_batch_driver.py" in " ".join(r.cmdline)]
    assert [(r.rank, r.step_id) for r in driver] == [(0, "batch")]
    v = diagnose(snapshot).verdicts[0]
    assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (0,)), v
    assert v.sites[0].endswith("rank_gated_collective.py:38")


def test_two_processes_claiming_a_rank_with_no_signs_either_both_stay() -> None:
    snapshot = _map(recorded("batch_monitor_background.default"), lambda r: True,
                    _without_signs)
    assert one_world(snapshot) is snapshot


def test_a_step_that_shows_a_ranks_signs_is_never_set_apart() -> None:
    # two trainings in one job (two worlds): the monitor in a torch.distributed frame
    dist = Frame(function="barrier", file="/venv/torch/distributed/distributed_c10d.py", line=9)

    def training(rank: Rank) -> Rank:
        first = rank.samples[0]
        thread = replace(first.threads[0], frames=(dist, *first.threads[0].frames))
        return replace(rank, samples=(replace(first, threads=(thread, *first.threads[1:])),
                                      *rank.samples[1:]))

    snapshot = _map(recorded("node_monitor_step.default"), _is_monitor, training)
    assert ranks_step(snapshot.nodes) == (None, ())
    assert one_world(snapshot) is snapshot


def test_with_no_signs_anywhere_the_step_with_more_processes_holds_the_ranks() -> None:
    # every training rank caught before torch.distributed: 4 processes against the monitors' 2
    snapshot = _map(recorded("node_monitor_step.default"), lambda r: not _is_monitor(r),
                    _without_signs)
    training_step, monitor_step = _steps(snapshot)
    assert ranks_step(snapshot.nodes) == (training_step, (monitor_step,))


def test_a_tie_or_ranks_that_do_not_collide_change_nothing() -> None:
    snapshot = recorded("node_monitor_step.default")
    bare = _map(snapshot, lambda r: True, _without_signs)
    # as many monitor processes as training ones, none of them with a rank's signs
    tie = _map(bare, lambda r: not _is_monitor(r) and r.rank in (2, 3),
               lambda r: replace(r, step_id="7"))
    assert ranks_step(tie.nodes) == (None, ())
    # the other step numbers its processes on (a heterogeneous job's component)
    apart = _map(snapshot, _is_monitor, lambda r: replace(r, rank=(r.rank or 0) + 4))
    assert ranks_step(apart.nodes) == (None, ())


def test_a_set_apart_process_is_listed_with_its_step_in_the_other_processes() -> None:
    sample = Sample(t=0.0, threads=(ThreadStack(thread_id=1, name="MainThread", active=False,
                                                frames=(Frame("sample", "/x/mon.py", 3),)),))
    snapshot = recorded("node_monitor_step.samples1")
    monitor = next(r for n in snapshot.nodes for r in n.ranks if _is_monitor(r))
    changed = _map(snapshot, lambda r: r is monitor, lambda r: replace(r, samples=(sample,)))
    node = next(n for n in one_world(changed).nodes if any(p.pid == monitor.pid
                                                            for p in n.other_processes))
    other = next(p for p in node.other_processes if p.pid == monitor.pid)
    assert (other.role, other.step_id, other.samples) == (NOT_A_RANK, monitor.step_id, (sample,))


@pytest.mark.parametrize("mode, severity", [("default", "critical"), ("samples1", "warning")])
def test_packed_trainings_are_judged_apart(mode: str, severity: str) -> None:
    # packed_trainings: healthy_slow (step 0, started first) and rank_gated_collective (step
    # 1) side by side, both numbering their ranks 0 and 1: it was "progressing" (the healthy
    # world's processes kept for ranks 0 and 1, the hung world's left out as duplicates)
    snapshot = recorded(f"packed_trainings.{mode}")
    assert [label for label, _ in worlds(snapshot)] == ["step 0", "step 1"]
    analysis = diagnose(snapshot)
    v = analysis.verdicts[0]
    assert (v.kind, v.severity, v.culprit_ranks) == ("mismatched_collective", severity, (0,)), v
    assert v.sites[0].endswith("rank_gated_collective.py:38")
    assert v.summary.startswith("step 1: rank 0 waits in barrier")
    # the healthy world's reading is listed too, and the note says how the job was read
    assert [w.summary.split(":")[0] for w in analysis.verdicts if w.kind == "progressing"] == ["step 0"]
    assert analysis.notes[0].startswith("the job runs 2 trainings as steps of their own")
    assert "the ranks and stacks shown are step 1's" in analysis.notes[0]
    assert {r.rank for r in analysis.ranks} == {0, 1} and analysis.world_size == 2


def test_steps_of_one_world_are_not_judged_apart() -> None:
    snapshot = recorded("packed_trainings.default")
    # the second step numbering its ranks on (2, 3), as a heterogeneous job's component does
    on = _map(snapshot, lambda r: r.step_id == "1", lambda r: replace(r, rank=(r.rank or 0) + 2))
    assert worlds(on) == ()
    # a step showing no rank's signs is no world (one_world sets it apart first)
    bare = _map(snapshot, lambda r: r.step_id == "0", _without_signs)
    assert worlds(bare) == ()


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_a_standalone_torchrun_on_each_node_is_a_world_a_node(mode: str) -> None:
    # standalone_per_node: `srun torchrun --standalone --nproc-per-node=2` on 2 nodes: one
    # step, each node's agent its own rendezvous (run id), both numbering ranks 0 and 1; node
    # 2's ranks were left out as duplicates and nothing said the nodes were two jobs
    snapshot = recorded(f"standalone_per_node.{mode}")
    assert [label for label, _ in worlds(snapshot)] == ["step 0 on node001", "step 0 on node002"]
    analysis = diagnose(snapshot)
    hangs = [v for v in analysis.verdicts if v.kind == "mismatched_collective"]
    assert [(v.summary.split(":")[0], v.culprit_ranks) for v in hangs] == [
        ("step 0 on node001", (0,)), ("step 0 on node002", (0,))]
    assert all(v.sites[0].endswith("rank_gated_collective.py:38") for v in hangs)
    assert not any(v.kind == "incomplete" for v in analysis.verdicts)  # each world's nodes only
    assert "torchrun --standalone" in analysis.notes[0]


def test_one_rendezvous_across_nodes_is_one_world() -> None:
    # torchrun under srun as meant: every agent the same rendezvous id, ranks numbered on
    snapshot = recorded("standalone_per_node.default")
    first = next(r for r in snapshot.nodes[0].ranks).env["TORCHELASTIC_RUN_ID"]
    one = replace(snapshot, nodes=(snapshot.nodes[0], replace(snapshot.nodes[1], ranks=tuple(
        replace(r, rank=(r.rank or 0) + 2, env={**r.env, "TORCHELASTIC_RUN_ID": first})
        for r in snapshot.nodes[1].ranks))))
    assert worlds(one) == ()


def test_a_rendezvous_named_in_some_ranks_environment_only_is_one_world() -> None:
    # mismatched_collectives_script_relaunch: each node's task (local rank 0, MASTER_ADDR set
    # in its os.environ only) ran its script again for local rank 1, whose environment names
    # the store: two keys in one step, one of them without a rendezvous. Ordering the keys
    # failed (None against a string): an internal error instead of a verdict
    snapshot = recorded("mismatched_collectives_script_relaunch.default")
    keys = {_world_key(r) for n in snapshot.nodes for r in n.ranks}
    assert len(keys) == 2 and {k[1] is None for k in keys} == {True, False}
    assert worlds(snapshot) == ()  # the ranks do not collide: one world
    v = diagnose(snapshot).verdicts[0]
    assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (1,)), v
    # AND when they collide they are judged apart, whichever key has no rendezvous
    collide = replace(snapshot, nodes=tuple(replace(n, ranks=tuple(
        replace(r, rank=(r.rank or 0) // 2 * 2) for r in n.ranks)) for n in snapshot.nodes))
    assert len(worlds(collide)) == 2


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_variables_a_batch_script_exports_are_no_sign_of_a_rank(mode: str) -> None:
    # node_monitor_exported_env: MASTER_ADDR, MASTER_PORT, WORLD_SIZE exported at the batch
    # script's top reach the monitors too; taken for signs, the monitor step was kept
    # (missing_rank 2, 3)
    snapshot = recorded(f"node_monitor_exported_env.{mode}")
    monitors = [r for n in snapshot.nodes for r in n.ranks if _is_monitor(r)]
    assert monitors and all({"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE"} <= set(r.env)
                            for r in monitors)
    v = diagnose(snapshot).verdicts[0]
    assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (0,)), v
    assert v.sites[0].endswith("rank_gated_collective.py:38")


def test_a_rank_between_collectives_is_told_by_its_connections_to_its_peers() -> None:
    # packed_trainings' healthy world caught outside torch.distributed, with no launcher's
    # variables (srun): its connections to each other (gloo's mesh, the store) still say it
    snapshot = recorded("packed_trainings.default")
    caught = _map(snapshot, lambda r: r.step_id == "0",
                  lambda r: replace(_without_signs(r), connections=r.connections))
    assert [label for label, _ in worlds(caught)] == ["step 0", "step 1"]
    # and without them it is no world: set apart beside the hung one
    bare = _map(snapshot, lambda r: r.step_id == "0", _without_signs)
    assert worlds(bare) == () and ranks_step(bare.nodes) == ("1", ("0",))


def test_a_pid_set_apart_on_one_node_leaves_the_same_pid_on_another_node_alone() -> None:
    # pids repeat across a real cluster's nodes: node002's rank 2 given the pid of node001's
    # monitor stays a rank
    snapshot = recorded("node_monitor_step.default")
    monitor = next(r for r in snapshot.nodes[0].ranks if _is_monitor(r))
    same = _map(snapshot, lambda r: r.rank == 2 and not _is_monitor(r),
                lambda r: replace(r, pid=monitor.pid))
    apart = one_world(same)
    assert 2 in {r.rank for n in apart.nodes for r in n.ranks}
    moved = [(n.name, p.pid) for n in apart.nodes for p in n.other_processes
             if p.role == NOT_A_RANK]
    assert (snapshot.nodes[0].name, monitor.pid) in moved
    assert (snapshot.nodes[1].name, monitor.pid) not in moved


def test_a_loopback_connection_is_a_peer_on_its_own_node_only() -> None:
    # packed_trainings' healthy world told only by connections: node-local addresses (127.0.0.1)
    # of the same node count; moved to another node, the same addresses are another host's
    snapshot = recorded("packed_trainings.default")
    caught = _map(snapshot, lambda r: r.step_id == "0",
                  lambda r: replace(_without_signs(r), connections=r.connections))
    assert len(worlds(caught)) == 2
    node = caught.nodes[0]
    ours = [r for r in node.ranks if r.step_id == "0"]
    split = replace(caught, nodes=(
        replace(node, ranks=tuple(r for r in node.ranks if r is not ours[1])),
        replace(node, name="node009", ranks=(ours[1],)),
    ))
    assert worlds(split) == ()

"""Diagnose snapshots built from REAL py-spy dumps (tests/fixtures/py_spy, see SOURCES.md)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from snapfactory import collective, node, rank, snap
from support.pyspy_text import parse_pyspy_text

from slurmdiag.analysis import diagnose
from slurmdiag.parsers.pyspy import parse_pyspy_json
from slurmdiag.snapshot import Frame, Rank, Sample, Snapshot, ThreadStack, Verdict

PY_SPY = Path(__file__).resolve().parent.parent / "fixtures" / "py_spy"
K = 3


def main_stacks(name: str) -> list[tuple[Frame, ...]]:
    """One main-thread stack per process of a real dump (aggregated pastes: one per header)."""
    dumps = parse_pyspy_text((PY_SPY / name).read_text())
    return [t.frames for d in dumps for t in d.threads if t.name == "MainThread"]


def ranks_from(
    stacks: list[tuple[Frame, ...]], first: int, world: int, active: bool = True
) -> list[Rank]:
    return [rank(first + i, *[s] * K, world=world, active=active) for i, s in enumerate(stacks)]


def test_bigscience_node48_broadcast_vs_node49_all_reduce_is_a_mismatch() -> None:
    # GIVEN node48's 4 ranks in broadcast (_bcast_pipe_scalar) and node49's 4 in all_reduce
    bcast = main_stacks("bigscience_tr11_node48_4procs_broadcast_aggregated.txt")
    allred = main_stacks("bigscience_tr11_node49_4procs_all_reduce_aggregated.txt")
    assert len(bcast) == len(allred) == 4
    s = snap(node("node48", *ranks_from(bcast, 0, 8)), node("node49", *ranks_from(allred, 4, 8)))
    # WHEN
    a = diagnose(s)
    v = a.verdicts[0]
    # THEN a 4:4 tie between different collectives; the rank-0 side is taken as the culprit
    assert v.kind == "mismatched_collective"
    assert "different collectives" in v.summary
    assert "broadcast" in v.summary and "all_reduce" in v.summary
    assert v.culprit_ranks == (0, 1, 2, 3)
    assert v.sites == ("megatron/training.py:983",)
    assert [c.label for c in a.classes] == ["0-3", "4-7"]
    assert {c.op for c in a.classes} == {"broadcast", "all_reduce"}


def test_bigscience_tr11_eval_hang_names_the_rank_stuck_in_the_dataloader() -> None:
    # GIVEN the whole tr11 picture: on node48 4 ranks broadcast in _bcast_pipe_scalar, 3 in
    # megatron's broadcast_data, 1 idle in the DataLoader; on node49 4 in all_reduce, 4 in recv
    node48 = main_stacks("bigscience_tr11_node48_4procs_broadcast_aggregated.txt") + main_stacks(
        "bigscience_tr11_node48_3procs_broadcast_aggregated.txt"
    )
    loader = main_stacks("bigscience_tr11_node48_dataloader_idle.txt")
    node49 = main_stacks("bigscience_tr11_node49_4procs_all_reduce_aggregated.txt") + main_stacks(
        "bigscience_tr11_node49_4procs_recv_aggregated.txt"
    )
    s = snap(
        node("node48", *ranks_from(node48, 0, 16), *ranks_from(loader, 7, 16, active=False)),
        node("node49", *ranks_from(node49, 8, 16)),
    )
    a = diagnose(s)
    v = a.verdicts[0]
    # THEN the straggler is rank 7, blocked in data loading under evaluate()
    assert v.kind == "straggler"
    assert v.culprit_ranks == (7,)
    assert v.sites == ("megatron/training.py:983",)
    assert "data loading" in v.summary
    assert any("different collectives" in e for e in v.evidence)
    ops = {r.rank: r.op for r in a.ranks}
    assert ops[0] == "broadcast" and ops[4] == "broadcast" and ops[8] == "all_reduce"
    assert ops[12] == "recv" and ops[7] is None


def test_bigscience_six_ranks_in_train_two_in_broadcast() -> None:
    # GIVEN 6 processes active in train() at megatron/training.py:915, 2 in broadcast; the
    # dump's headers say "(active)", not "(active+gil)": the GIL released (a CUDA sync)
    dumps = parse_pyspy_text((PY_SPY / "bigscience_hangdebug_train_vs_broadcast_annotated.txt")
                             .read_text())
    mains = [t for d in dumps for t in d.threads if t.name == "MainThread"]
    assert [t.owns_gil for t in mains] == [False, False]
    train, bcast = (t.frames for t in mains)

    def in_train(r: int) -> Rank:
        return rank(r, *[Sample(t=float(k), threads=(replace(mains[0], frames=train),))
                         for k in range(K)], world=8)

    ranks = [in_train(r) for r in range(6)] + ranks_from([bcast] * 2, 6, 8)
    a = diagnose(snap(node("node0", *ranks)))
    v = a.verdicts[0]
    assert v.kind == "spinning"
    assert v.culprit_ranks == (0, 1, 2, 3, 4, 5)
    assert v.sites == ("megatron/training.py:915", "megatron/training.py:train")
    # AND the same six shown holding the GIL (Python at work: a phase most ranks share, on a
    # job whose nodes gave no GPU state) is a slow step, not a spin (test_shared_phase.py)
    held = diagnose(snap(node("node0", *ranks_from([train] * 6 + [bcast] * 2, 0, 8))))
    assert held.verdicts[0].kind == "slow_step" and held.verdicts[0].culprit_ranks == v.culprit_ranks


def test_deepspeed_all_gather_coalesced_is_a_collective() -> None:
    (stack,) = main_stacks("issue_accelerate3104_deepspeed_all_gather_coalesced_PARTIAL.txt")
    a = diagnose(snap(node("n", *ranks_from([stack, stack], 0, 2))))
    assert a.verdicts[0].kind == "all_waiting"
    assert a.ranks[0].op == "all_gather_coalesced"


def test_real_pyspy_json_blocked_main_thread_is_a_lock_straggler() -> None:
    # GIVEN a real `py-spy dump --json` of a process whose main thread waits on an Event,
    # next to ranks waiting in a collective
    threads = parse_pyspy_json((PY_SPY / "local_pyspy0.4_json_blocked.json").read_text())
    blocked = Rank(
        rank=1,
        pid=9877,
        world_size=3,
        state="S",
        cpu_percent=0.0,
        samples=tuple(Sample(t=float(i), threads=threads) for i in range(K)),
    )
    s = snap(
        node(
            "n1",
            rank(0, *[collective("all_reduce")] * K, world=3),
            blocked,
            rank(2, *[collective("all_reduce")] * K, world=3),
        )
    )
    a = diagnose(s)
    v = a.verdicts[0]
    assert (v.kind, v.culprit_ranks) == ("straggler", (1,))
    assert v.sites == ("/tmp/slurmdiag_pyspy/blocked_rank.py:12",)
    # Event.wait: a wait for another thread's signal, that thread named
    assert "waiting for another thread at /tmp/slurmdiag_pyspy/blocked_rank.py:12 (its main " \
        "thread waits on thread heartbeat (/tmp/slurmdiag_pyspy/blocked_rank.py:17))" in v.summary
    view = next(r for r in a.ranks if r.rank == 1)
    assert view.kind == "lock"
    assert view.busy_threads == ("heartbeat (/tmp/slurmdiag_pyspy/blocked_rank.py:17)",)


def test_real_pyspy_native_dump_classifies_the_same() -> None:
    (dump,) = parse_pyspy_text((PY_SPY / "local_pyspy0.4_text_native_blocked.txt").read_text())
    main = next(t for t in dump.threads if t.name == "MainThread")
    blocked = Rank(
        rank=0,
        pid=9877,
        world_size=2,
        samples=tuple(
            Sample(t=float(i), threads=(ThreadStack("MainThread", 1, frames=main.frames),))
            for i in range(K)
        ),
    )
    s = snap(node("n1", blocked, rank(1, *[collective("barrier")] * K, world=2)))
    v = diagnose(s).verdicts[0]
    assert (v.kind, v.culprit_ranks, v.sites) == ("straggler", (0,), ("blocked_rank.py:12",))


# Snapshots of real hung gloo jobs (torchrun, 4 ranks; see local_gloo_snapshots.md)


def load(mode: str) -> Snapshot:
    return Snapshot.from_json((PY_SPY / f"local_gloo_{mode}_snapshot.json").read_text())


def test_real_gloo_rank_gated_barrier() -> None:
    v = diagnose(load("gated")).verdicts[0]
    assert (v.kind, v.severity, v.culprit_ranks) == ("mismatched_collective", "critical", (0,))
    assert v.sites == ("/tmp/sdx/hang.py:26",)


def test_real_gloo_sleeping_rank() -> None:
    v = diagnose(load("sleep")).verdicts[0]
    # the line it sleeps on, and its function (a sleep-poll loop moves between two lines)
    assert (v.kind, v.culprit_ranks, v.sites) == (
        "straggler",
        (1,),
        ("/tmp/sdx/hang.py:28", "/tmp/sdx/hang.py:main"),
    )


def test_real_gloo_spinning_rank() -> None:
    v = diagnose(load("spin")).verdicts[0]
    assert (v.kind, v.culprit_ranks) == ("spinning", (2,))
    assert "/tmp/sdx/hang.py:spin" in v.sites


def test_real_gloo_healthy_job_is_progressing_by_its_network_traffic() -> None:
    # GIVEN every py-spy sample caught the ranks in time.sleep, but strace saw writev/recvfrom
    a = diagnose(load("healthy"))
    assert [(v.kind, v.severity) for v in a.verdicts] == [("progressing", "info")]


def test_real_gloo_healthy_job_without_strace_is_still_not_a_warning() -> None:
    s = load("healthy")
    s = replace(
        s,
        nodes=tuple(
            replace(n, ranks=tuple(replace(r, strace=None) for r in n.ranks)) for n in s.nodes
        ),
    )
    a = diagnose(s)
    assert {v.severity for v in a.verdicts} == {"info"}
    assert [v.kind for v in a.verdicts] == ["idle"]


def test_real_gloo_hang_is_not_mistaken_for_traffic() -> None:
    for mode in ("gated", "sleep", "spin"):
        assert diagnose(load(mode)).verdicts[0].severity == "critical"


# The scenario programs of tests/scenarios, hand-launched and recorded (see the .md above)

SCENARIOS = "/work/main/tests/scenarios/"


def scenario(name: str) -> Verdict:
    text = (PY_SPY / f"local_scenario_{name}_snapshot.json").read_text()
    return diagnose(Snapshot.from_json(text)).verdicts[0]


def test_scenario_uneven_inputs_ddp_backward_vs_barrier() -> None:
    v = scenario("uneven_inputs")
    assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (2,))
    assert v.sites == (f"{SCENARIOS}uneven_inputs.py:69",)
    assert "backward" in v.summary


def test_scenario_spinning_rank_is_named_by_function() -> None:
    v = scenario("spinning_rank")
    assert (v.kind, v.culprit_ranks) == ("spinning", (3,))
    assert v.sites == (f"{SCENARIOS}spinning_rank.py:sample_crop_box",)


def test_scenario_blocked_outside_collective() -> None:
    v = scenario("blocked_outside_collective")
    assert (v.kind, v.culprit_ranks) == ("straggler", (2,))
    assert v.sites == (f"{SCENARIOS}blocked_outside_collective.py:46",)


def test_scenario_healthy_slow_is_progressing() -> None:
    text = (PY_SPY / "local_scenario_healthy_slow_snapshot.json").read_text()
    verdicts = diagnose(Snapshot.from_json(text)).verdicts
    assert [(v.kind, v.severity) for v in verdicts] == [("progressing", "info")]


def test_scenario_dead_rank_is_missing() -> None:
    v = scenario("dead_rank")
    assert (v.kind, v.severity, v.culprit_ranks) == ("missing_rank", "critical", (3,))

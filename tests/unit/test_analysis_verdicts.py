"""Verdict rules: each hang kind, the tie-breaks, progress, and incomplete snapshots."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

from snapfactory import (
    TRAIN,
    collective,
    dataloader_wait,
    in_user,
    job,
    map_every_rank,
    node,
    rank,
    recorded,
    snap,
    spinning_in,
    stack,
    thread,
)

from slurmdiag.analysis import analyze, diagnose
from slurmdiag.analysis.model import Analysis
from slurmdiag.snapshot import LogFinding, Rank, Sample, Snapshot, Verdict, WorkerProcess

K = 3  # samples per rank


def hang(analysis: Analysis) -> Verdict:
    """The first (most severe) verdict, which is the stack-based one in these tests."""
    assert analysis.verdicts, "no verdict"
    return analysis.verdicts[0]


def kinds(analysis: Analysis) -> list[str]:
    return [v.kind for v in analysis.verdicts]


# --------------------------------------------------------------------------------- mismatched


def test_odd_rank_in_a_different_collective_is_the_culprit() -> None:
    # GIVEN 2 nodes x 4 ranks, rank 5 in a barrier at line 53, the others in all_reduce at 50
    s = job(2, 4, lambda r: [collective("barrier", 53) if r == 5 else collective("all_reduce")] * K)
    # WHEN
    v = hang(diagnose(s))
    # THEN
    assert v.kind == "mismatched_collective"
    assert v.severity == "critical"
    assert v.culprit_ranks == (5,)
    assert v.sites == (f"{TRAIN}:53",)
    assert "different collectives" in v.summary
    assert "gate only the side effect" in (v.next_step or "")


def test_majority_has_no_first_rank_bias() -> None:
    # rank 0 is the odd one: it is the culprit, not the reference
    s = job(1, 4, lambda r: [collective("barrier", 53) if r == 0 else collective("all_reduce")] * K)
    v = hang(diagnose(s))
    assert (v.kind, v.culprit_ranks, v.sites) == ("mismatched_collective", (0,), (f"{TRAIN}:53",))


def test_same_collective_from_different_call_sites() -> None:
    s = job(2, 2, lambda r: [collective("all_reduce", 61 if r == 2 else 50)] * K)
    v = hang(diagnose(s))
    assert v.kind == "mismatched_collective"
    assert v.culprit_ranks == (2,)
    assert v.sites == (f"{TRAIN}:61",)
    assert "different call sites" in v.summary


def test_tie_one_to_one_picks_the_rank_gated_barrier_on_rank_0() -> None:
    # GIVEN 2 ranks: `if rank == 0: dist.barrier()` -> rank 0 in barrier, rank 1 in all_reduce
    s = job(2, 1, lambda r: [collective("barrier", 53) if r == 0 else collective("all_reduce")] * K)
    v = hang(diagnose(s))
    assert v.kind == "mismatched_collective"
    assert v.culprit_ranks == (0,)
    assert v.sites == (f"{TRAIN}:53",)
    assert any("tie" in e for e in v.evidence)


def test_tie_prefers_the_barrier_over_rank_0() -> None:
    # `if rank == 1: barrier()`: the barrier (+2) outweighs holding rank 0 (+1)
    s = job(2, 1, lambda r: [collective("barrier", 53) if r == 1 else collective("all_reduce")] * K)
    v = hang(diagnose(s))
    assert (v.culprit_ranks, v.sites) == ((1,), (f"{TRAIN}:53",))


def test_tie_prefers_a_side_effect_path_as_culprit() -> None:
    # 2 nodes split 2:2 between the step's all_reduce and one in save_checkpoint (no rank 0)
    def stacks(r: int) -> list:
        if r in (0, 1):
            return [collective("all_reduce", 50)] * K
        return [collective("all_reduce", 140, fn="save_checkpoint")] * K

    v = hang(diagnose(job(2, 2, stacks)))
    # the side-effect path (sign 4 of TIE_RULES) decides before rank 0 (sign 5), and says so
    assert (v.kind, v.culprit_ranks, v.confidence) == ("mismatched_collective", (2, 3), "high")
    assert any("decided by the first sign" in e and "(4 of 6)" in e for e in v.evidence)


def test_a_pair_tie_blames_the_rank_that_began_a_step_in_ddps_forward() -> None:
    # GIVEN ddp_skipped_backward at two ranks, recorded: rank 1 skipped step 3's backward on an
    # inf loss and waits in step 4's forward (DDP's buffer broadcast), rank 0 in step 3's
    # backward (found by tests/accuracy.py --shape 2x1: rank 0 was blamed, 'the classic gate')
    v = hang(diagnose(recorded("ddp_skipped_backward.2x1.default")))
    # THEN rank 1 is the culprit, by the DDP-forward sign, which comes before rank 0's
    assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (1,))
    assert any("(5 of 6)" in e and "in DDP's forward" in e for e in v.evidence), v.evidence
    assert v.sites[0].endswith("tests/scenarios/ddp_skipped_backward.py:46")


def test_tie_decided_by_rank_0_alone_says_it_is_a_guess() -> None:
    # GIVEN 2:2 between two plain all_reduce lines: nothing but rank 0 tells the sides apart
    # (the lie: rank 0's side may well be the healthy one)
    def stacks(r: int) -> list:
        return [collective("all_reduce", 50 if r in (0, 1) else 60)] * K

    v = hang(diagnose(job(2, 2, stacks)))
    # THEN rank 0's side is named by the last sign, with medium confidence, not high
    assert (v.culprit_ranks, v.confidence) == ((0, 1), "medium")
    assert any("(6 of 6)" in e and "rank 0" in e for e in v.evidence), v.evidence


def test_unbreakable_tie_names_every_tied_side() -> None:
    def stacks(r: int) -> list:
        return [collective("all_reduce", {0: 50, 1: 50, 2: 52, 3: 52, 4: 54, 5: 54}[r])] * K

    # ranks 0-1 at :50 hold rank 0 (+1); 2-3 and 4-5 tie at 0: no unique reference
    v = hang(diagnose(job(3, 2, stacks)))
    assert v.culprit_ranks == (0, 1, 2, 3, 4, 5)
    assert "cannot tell" in v.summary


def test_minority_of_two_groups_among_three() -> None:
    def stacks(r: int) -> list:
        if r == 6:
            return [collective("broadcast", 70)] * K
        if r == 7:
            return [collective("barrier", 53)] * K
        return [collective("all_reduce")] * K

    v = hang(diagnose(job(2, 4, stacks)))
    assert v.culprit_ranks == (6, 7)
    assert v.sites == (f"{TRAIN}:70", f"{TRAIN}:53")


# --------------------------------------------------------------------------------- straggler


def test_rank_in_data_loading_is_a_straggler() -> None:
    s = job(2, 4, lambda r: [dataloader_wait(44) if r == 5 else collective("all_reduce")] * K)
    v = hang(diagnose(s))
    assert v.kind == "straggler"
    assert v.culprit_ranks == (5,)
    assert v.sites == (f"{TRAIN}:44",)
    assert "data loading" in v.summary
    assert "DataLoader" in (v.next_step or "")


def test_rank_sleeping_in_its_own_code_is_a_straggler() -> None:
    # time.sleep is a C call: the innermost Python frame is the user's line, the thread idle
    s = job(
        2,
        2,
        lambda r: [in_user(70) if r == 1 else collective("all_reduce")] * K,
        overrides={1: {"wchan": "hrtimer_nanosleep", "cpu": 0.0}},
    )
    v = hang(diagnose(s))
    assert (v.kind, v.culprit_ranks) == ("straggler", (1,))
    assert v.sites == (f"{TRAIN}:70", f"{TRAIN}:train_step")  # the line, then the function
    assert "sleeping" in v.summary


def test_rank_in_state_d_without_stack_is_a_straggler() -> None:
    s = job(
        1,
        4,
        lambda r: [] if r == 3 else [collective("all_reduce")] * K,
        overrides={3: {"state": "D", "wchan": "nfs_wait_bit_killable"}},
    )
    v = hang(diagnose(s))
    assert (v.kind, v.culprit_ranks, v.sites) == ("straggler", (3,), ())
    assert "uninterruptible" in v.summary


def test_dead_dataloader_worker_is_cited() -> None:
    worker = WorkerProcess(pid=4242, role="dataloader_worker", state="Z")
    s = job(
        1,
        2,
        lambda r: [dataloader_wait() if r == 0 else collective("all_reduce")] * K,
        overrides={0: {"workers": [worker]}},
    )
    v = hang(diagnose(s))
    assert v.kind == "straggler" and v.culprit_ranks == (0,)
    assert any("dataloader_worker pid 4242 state Z" in e for e in v.evidence)


# --------------------------------------------------------------------------------- spinning


def test_rank_moving_in_its_own_loop_is_spinning_reported_by_function() -> None:
    def stacks(r: int) -> list:
        if r == 6:
            return [spinning_in("busy_loop", line) for line in (21, 23, 22)]
        return [collective("all_reduce")] * K

    s = job(2, 4, stacks, overrides={6: {"cpu": 99.0, "active": True}})
    v = hang(diagnose(s))
    assert v.kind == "spinning"
    assert v.culprit_ranks == (6,)
    assert v.sites == (f"{TRAIN}:busy_loop",)
    assert "99% CPU" in " ".join(v.evidence)


def test_rank_spinning_on_one_line_is_spinning_at_that_line() -> None:
    s = job(
        1,
        2,
        # (the step's all_reduce: a barrier there is a rank-gated phase, a short look cannot
        # tell, test_a_two_rank_job_whose_rank_0_evaluates_before_a_barrier_is_a_gated_phase)
        lambda r: [in_user(33) if r == 1 else collective("all_reduce")] * K,
        overrides={1: {"cpu": 100.0, "active": True}},
    )
    v = hang(diagnose(s))
    # the line held in every sample; the function is named too, as a busy rank's line varies
    assert (v.kind, v.culprit_ranks) == ("spinning", (1,))
    assert v.sites == (f"{TRAIN}:33", f"{TRAIN}:train_step")


# --------------------------------------------------------------------------------- missing


def test_missing_rank_on_a_node_that_reported() -> None:
    s = job(2, 4, lambda r: [collective("all_reduce")] * K, skip=[6])
    a = diagnose(s)
    v = hang(a)
    assert (v.kind, v.severity, v.culprit_ranks) == ("missing_rank", "critical", (6,))
    assert a.missing_ranks == (6,)
    assert a.world_size == 8


def test_zombie_rank_is_missing() -> None:
    s = job(
        1,
        3,
        lambda r: [] if r == 2 else [collective("all_reduce")] * K,
        overrides={2: {"state": "Z"}},
    )
    v = hang(diagnose(s))
    assert (v.kind, v.culprit_ranks) == ("missing_rank", (2,))
    assert "zombie" in v.summary


def test_ranks_of_a_node_that_timed_out_are_unknown_not_missing() -> None:
    # GIVEN node002 timed out: its ranks 4-7 are absent from the snapshot
    s = job(2, 4, lambda r: [collective("all_reduce")] * K, skip=range(4, 8))
    s = replace(s, nodes=(s.nodes[0], replace(s.nodes[1], status="timeout", message="deadline")))
    a = diagnose(s)
    assert a.missing_ranks == ()
    assert a.unknown_ranks == (4, 5, 6, 7)
    assert kinds(a) == ["all_waiting", "incomplete"]
    assert any("confidence lowered" in e for e in a.verdicts[0].evidence)


def test_missing_rank_on_a_reporting_node_next_to_a_failed_node() -> None:
    # node001 reported ranks 0-2 of its block 0-3, node002 failed: 3 is missing, 4-7 unknown
    s = job(2, 4, lambda r: [collective("all_reduce")] * K, skip=[3, 4, 5, 6, 7])
    s = replace(s, nodes=(s.nodes[0], replace(s.nodes[1], status="unreachable")))
    a = diagnose(s)
    assert a.missing_ranks == (3,)
    assert a.unknown_ranks == (4, 5, 6, 7)
    assert hang(a).kind == "missing_rank" and hang(a).culprit_ranks == (3,)


def test_ranks_of_other_het_components_are_unknown_not_missing() -> None:
    # GIVEN an attach to component +1 of a het job whose step spans both components (world 4)
    s = job(1, 2, lambda r: [collective("all_reduce")] * K, world=4)
    s = replace(s, job=replace(s.job, het_job_id="193", het_job_offset="1"))
    a = diagnose(s)
    # THEN ranks 2-3 (in the other component) are unknown, with a note, and nobody is dead
    assert a.missing_ranks == () and a.unknown_ranks == (2, 3)
    assert "missing_rank" not in kinds(a)
    assert any("component 193+1" in n for n in a.notes)
    # AND the terminal says why they are unknown
    from slurmdiag.report.terminal import format_summary

    text = "\n".join(format_summary(s, a, color=False, report_path=None))
    assert "unknown ranks (other het components): 2-3" in text


# --------------------------------------------------------------------------------- all waiting


def test_every_rank_in_the_same_collective_points_below_python() -> None:
    a = diagnose(job(4, 2, lambda r: [collective("all_reduce")] * K))
    assert kinds(a) == ["all_waiting"]
    v = a.verdicts[0]
    assert v.severity == "critical" and v.culprit_ranks == ()
    assert v.sites == (f"{TRAIN}:50",)
    assert "Flight Recorder" in (v.next_step or "")


def test_every_rank_in_init_process_group_is_a_rendezvous_that_never_formed() -> None:
    # GIVEN every rank still inside init_process_group (a store nobody reaches, a port taken)
    a = diagnose(job(2, 2, lambda r: [collective("init_process_group", user_line=12)] * K))
    # THEN the verdict says the group never formed and points at the rendezvous, not at
    # collective queues (there are none yet)
    assert kinds(a) == ["all_waiting"]
    v = a.verdicts[0]
    assert "never formed" in v.summary and "MASTER_ADDR" in (v.next_step or "")
    assert "Flight Recorder" not in (v.next_step or "")


def test_launchers_waiting_in_their_rendezvous_explain_why_no_rank_started() -> None:
    # GIVEN a job with no rank yet: its torchrun agent waits for a second node that never joins
    # (frames as py-spy printed them for torchrun --nnodes=2 started on one node)
    rdzv = "/venv/lib/python3.11/site-packages/torch/distributed/elastic/rendezvous"
    agent_stack = stack(
        f"_delay {rdzv}/utils.py:181",
        f"_DistributedRendezvousOpExecutor.run {rdzv}/dynamic_rendezvous.py:685",
        f"DynamicRendezvousHandler.next_rendezvous {rdzv}/dynamic_rendezvous.py:1171",
        "SimpleElasticAgent._rendezvous /venv/lib/python3.11/site-packages/torch/distributed/"
        "elastic/agent/server/api.py:528",
    )
    agent = WorkerProcess(pid=77, role="agent", cmdline=("torchrun", "--nnodes=2"),
                          samples=(Sample(t=0.0, threads=(thread(agent_stack),)),))
    s = snap(replace(node("node001"), other_processes=(agent,)), node("node002"))
    a = diagnose(s)
    # THEN the verdict says the launchers wait in their rendezvous, where, and what to check
    (v,) = a.verdicts
    assert (v.kind, v.severity) == ("no_ranks", "critical")
    assert "rendezvous" in v.summary and "node001" in v.summary
    assert v.sites == (f"{rdzv}/dynamic_rendezvous.py:1171",)
    assert "--rdzv-endpoint" in (v.next_step or "")
    assert any("node002" in e for e in v.evidence)
    # AND without such a launcher it stays the plain "no rank" warning
    (plain,) = diagnose(snap(node("node001"))).verdicts
    assert (plain.kind, plain.severity) == ("no_ranks", "warning")


def test_every_rank_busy_at_one_line_with_no_collective_is_not_a_hang() -> None:
    # GIVEN every rank running in its own code, no collective or sync on any stack (issue 13:
    # a silent compute phase got "all_waiting")
    s = job(2, 2, lambda r: [in_user(77)] * K, overrides={r: {"active": True} for r in range(4)})
    # WHEN diagnosed THEN no hang verdict: the job computes
    a = diagnose(s)
    assert [(v.kind, v.severity) for v in a.verdicts] == [("progressing", "info")]
    assert "no collective" in a.verdicts[0].summary


def test_every_rank_sleeping_together_is_idle_info() -> None:
    s = job(
        2,
        2,
        lambda r: [in_user(70)] * K,
        overrides={r: {"wchan": "hrtimer_nanosleep"} for r in range(4)},
    )
    a = diagnose(s)
    assert [(v.kind, v.severity) for v in a.verdicts] == [("idle", "info")]


def test_a_sleeper_read_as_it_wakes_still_sleeps_with_the_others() -> None:
    # GIVEN every rank at one line of its own code, ranks 1-3 in the kernel's nanosleep and
    # rank 0 read at the instant its sleep ended: runnable, no wait channel, no CPU yet (CI:
    # healthy_slow was called all_waiting so)
    asleep = {"wchan": "hrtimer_nanosleep", "state": "S", "cpu": 0.0}
    woke = {"wchan": None, "state": "R", "cpu": 0.0}
    # the main thread's CPU time read in each sample, unchanged over the look
    still = [Sample(t=0.5 * i, threads=(replace(thread(in_user(70)), cpu_s=2.0),))
             for i in range(K)]
    s = job(1, 4, lambda r: still, overrides={r: woke if r == 0 else asleep for r in range(4)})
    # WHEN diagnosed THEN the job sleeps: idle, info
    assert [(v.kind, v.severity) for v in diagnose(s).verdicts] == [("idle", "info")]
    # AND a rank of that stack the kernel says waits on a pipe keeps it from being a sleep
    s = job(1, 4, lambda r: still,
            overrides={r: {**asleep, "wchan": "pipe_read"} if r == 0 else asleep
                       for r in range(4)})
    assert "idle" not in kinds(diagnose(s))


def test_ranks_read_in_a_lock_after_their_sleep_ended_were_sampled_there_and_move() -> None:
    # GIVEN healthy_slow's look (test_nic, 2 samples 0.5 s apart): every rank at its sleep's line
    # in both samples, its state read just after as its sleep ended, in the all_reduce's futex
    asleep = [in_user(22)] * 2
    overrides = {r: {"wchan": "futex_do_wait", "state": "S", "cpu": 0.0} for r in range(4)}
    # (before the collector sampled such a rank again: all_waiting, "blocked on a lock")
    assert kinds(diagnose(job(1, 4, lambda r: asleep, overrides=overrides)))[0] == "all_waiting"
    # WHEN the collector took the sample that goes with that state (sample_again)
    moved = job(1, 4, lambda r: [*asleep, collective("all_reduce")], overrides=overrides)
    # THEN the ranks moved into their all_reduce: no hang
    assert [(v.kind, v.severity) for v in diagnose(moved).verdicts] == [("progressing", "info")]


def test_a_sample_taken_again_is_no_new_moment_of_the_look() -> None:
    # GIVEN a --samples 1 look of a straggler (rank 3 computing alone, the rest in all_reduce),
    # rank 0 sampled once more as its wait changed after its round (the same stack)
    def again(r: int) -> list:
        first = collective("all_reduce") if r < 3 else in_user(60)
        extra = Sample(t=0.05, threads=(thread(collective("all_reduce")),), again=True)
        return [first, extra] if r == 0 else [first]

    a = diagnose(job(1, 4, again, overrides={3: {"cpu": 100.0, "state": "R"}}))
    # THEN the look is still one sample per rank: the hang verdict is a warning, not critical
    assert a.samples == 1
    assert (a.verdicts[0].culprit_ranks, a.verdicts[0].severity) == ((3,), "warning"), a.verdicts
    # AND read as a second round, it would have been critical
    plain = job(1, 4, lambda r: [collective("all_reduce") if r < 3 else in_user(60)] * 2,
                overrides={3: {"cpu": 100.0, "state": "R"}})
    assert diagnose(plain).verdicts[0].severity == "critical"


def test_a_look_where_no_rank_could_be_read_says_so() -> None:
    # GIVEN two ranks whose every dump failed (the analysis said nothing of such a look)
    failed = Sample(t=0.0, threads=(), error="py-spy: Failed to copy PyCodeObject")
    s = snap(node("n1", rank(0, failed), rank(1, failed)))
    # WHEN diagnosed THEN an incomplete warning names them and the error, with what to do
    (v,) = diagnose(s).verdicts
    assert (v.kind, v.severity) == ("incomplete", "warning")
    assert "no stack could be read for ranks 0-1" in v.summary
    assert "rank 0: py-spy: Failed to copy PyCodeObject" in v.evidence
    assert "attach again" in (v.next_step or "")


# --------------------------------------------------------------------------------- progress


def test_healthy_slow_job_is_only_progressing() -> None:
    # GIVEN ranks alternating between sleep/compute and all_reduce across the samples
    def stacks(r: int) -> list:
        phase = r % 2
        return [in_user(44) if (i + phase) % 2 else collective("all_reduce") for i in range(K)]

    s = job(4, 2, stacks, overrides={r: {"wchan": "hrtimer_nanosleep"} for r in range(8)})
    a = diagnose(s)
    assert [(v.kind, v.severity) for v in a.verdicts] == [("progressing", "info")]


def test_healthy_job_all_in_step_together_is_progressing() -> None:
    def stacks(r: int) -> list:
        return [collective("all_reduce"), in_user(44), in_user(44)]

    a = diagnose(job(2, 2, stacks))
    assert [(v.kind, v.severity) for v in a.verdicts] == [("progressing", "info")]


def test_every_rank_moving_is_progressing() -> None:
    def stacks(r: int) -> list:
        return [spinning_in("forward", 10 + (i + r) % 4) for i in range(K)]

    a = diagnose(job(2, 3, stacks, overrides={r: {"active": True} for r in range(6)}))
    assert [(v.kind, v.severity) for v in a.verdicts] == [("progressing", "info")]


def test_one_sample_only_turns_hang_verdicts_into_warnings() -> None:
    s = job(1, 4, lambda r: [collective("barrier", 53) if r == 2 else collective("all_reduce")])
    v = hang(diagnose(s))
    assert (v.kind, v.severity, v.culprit_ranks) == ("mismatched_collective", "warning", (2,))
    assert any("one sample" in e for e in v.evidence)


# --------------------------------------------------------------------------------- shapes


def test_single_node_ragged_and_unidentified() -> None:
    s = snap(
        node(
            "solo",
            *[rank(r, *[collective("all_reduce")] * K, world=3) for r in (0, 1)],
            rank(2, *[dataloader_wait()] * K, world=3),
            rank(None, in_user(1), pid=55),
        ),
    )
    a = diagnose(s)
    v = hang(a)
    assert (v.kind, v.culprit_ranks) == ("straggler", (2,))
    assert any("without a rank" in n for n in a.notes)


def test_ragged_ranks_per_node() -> None:
    s = job(3, [3, 5, 1], lambda r: [dataloader_wait() if r == 8 else collective("all_reduce")] * K)
    v = hang(diagnose(s))
    assert (v.kind, v.culprit_ranks) == ("straggler", (8,))


def test_empty_snapshot_is_incomplete() -> None:
    a = diagnose(snap())
    assert [(v.kind, v.severity) for v in a.verdicts] == [("incomplete", "warning")]
    assert a.tree is None and a.classes == ()


def test_nodes_without_ranks_give_no_ranks() -> None:
    a = diagnose(snap(node("n1"), node("n2")))
    assert [(v.kind, v.severity) for v in a.verdicts] == [("no_ranks", "warning")]


def test_only_unidentified_processes_are_incomplete() -> None:
    a = diagnose(snap(node("n1", rank(None, in_user(3), pid=9))))
    assert kinds(a) == ["incomplete"]


def test_rank_views_carry_status_and_site() -> None:
    s = job(1, 2, lambda r: [dataloader_wait() if r == 1 else collective("all_reduce")] * K)
    a = diagnose(s)
    assert [(v.rank, v.status, v.kind, v.op) for v in a.ranks] == [
        (0, "waiting", "collective", "all_reduce"),
        (1, "blocked", "data_loading", None),
    ]
    assert a.ranks[1].site == f"{TRAIN}:44"
    assert a.samples == K


def test_verdicts_are_deterministic_and_independent_of_node_order() -> None:
    s = job(
        4, 4, lambda r: [collective("barrier", 53) if r in (3, 9) else collective("all_reduce")] * K
    )
    first = diagnose(s)
    nodes = list(s.nodes)
    random.Random(1).shuffle(nodes)
    shuffled = diagnose(Snapshot(job=s.job, nodes=tuple(nodes)))
    assert first.verdicts == shuffled.verdicts == diagnose(s).verdicts
    assert first.verdicts[0].culprit_ranks == (3, 9)


def test_critical_first_then_warning_then_info() -> None:
    s = job(1, 2, lambda r: [collective("all_reduce")] * K)
    s = replace(s, nodes=(*s.nodes, node("n9", status="timeout")), job=replace(s.job, nodes=()))
    order = [v.severity for v in diagnose(s).verdicts]
    assert order == sorted(order, key=["critical", "warning", "info"].index)


def test_analyze_is_diagnose() -> None:
    assert analyze is diagnose


def test_rank_py_spy_could_not_read_while_all_others_wait_is_the_suspect() -> None:
    unreadable = Sample(t=0.0, error="Error: Failed to suspend process")
    s = job(
        1,
        4,
        lambda r: [unreadable] * K if r == 2 else [collective("all_reduce")] * K,
    )
    v = hang(diagnose(s))
    assert (v.kind, v.severity, v.culprit_ranks) == ("straggler", "warning", (2,))
    assert any("Failed to suspend" in e for e in v.evidence)


def test_flight_recorder_verdicts_join_the_analysis() -> None:
    fr = Path(__file__).resolve().parent.parent / "fixtures" / "flight_recorder"
    dumps = {str(r): (fr / f"local_gloo_torch2.13_hook_rank{r}.json").read_text() for r in range(3)}
    s = replace(
        job(1, 3, lambda r: [collective("all_reduce")] * K), flight_recorder={"dumps": dumps}
    )
    a = diagnose(s)
    assert "flight_recorder_mismatch" in kinds(a)
    assert any("see flight_recorder_mismatch" in e for e in a.verdicts[0].evidence)


def test_watchdog_timeout_in_the_log_of_a_progressing_job_is_a_warning() -> None:
    line = (
        "[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=808, OpType=ALLREDUCE, NumelIn=1, "
        "NumelOut=1, Timeout(ms)=600000) ran for 600020 milliseconds before timing out."
    )
    finding = LogFinding("job.out", 3, "watchdog_timeout", line, rank=1)
    s = replace(
        job(1, 2, lambda r: [collective("all_reduce"), in_user(44), in_user(44)]),
        log_findings=(finding,),
    )
    assert [(v.kind, v.severity) for v in diagnose(s).verdicts] == [
        ("watchdog_timeout", "warning"),
        ("progressing", "info"),
    ]


def test_a_side_path_is_named_by_a_word_of_the_function_not_a_substring() -> None:
    # GIVEN the functions of rank-gated side paths and of a training loop's own frames
    from slurmdiag.analysis.verdicts import _named_like_a_side_path

    side = ["save_checkpoint", "report_nonfinite_loss", "Trainer.evaluate", "validate",
            "_log_metrics", "LogWriter.write", "maybe_log", "publish_eval_summary", "dump_state"]
    loop = ["compute_logits", "logit_scale", "log_softmax_loss", "invalid_batch", "fingerprint",
            "catalog_items", "train_step", "all_reduce_gradients", "main"]
    # THEN only the side paths count: "log" in logits or before a math word, "valid" inside
    # "invalid", "print" inside "fingerprint" do not
    assert [f for f in side if not _named_like_a_side_path(f)] == []
    assert [f for f in loop if _named_like_a_side_path(f)] == []


def test_a_two_rank_job_whose_rank_0_evaluates_before_a_barrier_is_a_gated_phase() -> None:
    # GIVEN rank0_eval_barrier at two ranks, recorded: rank 0 in its pure-Python validation
    # pass, rank 1 in the barrier after it (found by tests/accuracy.py --shape 2x1: as many
    # busy as waiting was a critical "spinning" on a healthy job)
    v = diagnose(recorded("rank0_eval_barrier.2x1.default")).verdicts[0]
    # THEN it is what a short look cannot tell from a hang, not an alarm
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (0,))
    assert v.summary.startswith("a rank-gated phase or a hang, cannot tell: rank 0 is busy")


def test_one_package_in_each_ranks_own_venv_is_one_collective_and_two_lines_are_two() -> None:
    # installed_package: the job's package installed in a venv of each rank's own, ranks 0, 1,
    # 3 in its loop.py:28's all_reduce (three paths, one line of one program)
    recording = recorded("installed_package.default.console_script")
    verdict = diagnose(recording).verdicts[0]
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (2,))
    assert not any("different collectives" in e for e in verdict.evidence), verdict.evidence
    # AND the summary names it once, at the first rank's path
    assert verdict.summary.endswith(
        "ranks 0-1,3 wait in all_reduce at /tmp/slurmdiag-accuracy/batch1/installed_package/"
        "venv-0/lib/python3.11/site-packages/trainkit/loop.py:28"), verdict.summary
    # AND with rank 3 at another line of it, the waiting ranks are in two collectives
    def elsewhere(rank: Rank) -> Rank:
        if rank.rank != 3:
            return rank
        samples = tuple(replace(x, threads=tuple(
            replace(t, frames=tuple(replace(f, line=f.line + 4) if f.file.endswith("loop.py")
                                    else f for f in t.frames)) for t in x.threads))
            for x in rank.samples)
        return replace(rank, samples=samples)

    moved = diagnose(map_every_rank(recording, elsewhere)).verdicts[0]
    assert ("the waiting ranks sit in 2 different collectives: a consequence of the culprit, "
            "or a mismatch of their own") in moved.evidence, moved.evidence
    assert "wait in collectives (all_reduce at" in moved.summary, moved.summary

"""A world asked bigger than the job started (`world_size_overcount`, recorded by `make accuracy`):
4 processes call init_process_group(world_size=8), their world counted from a hard-coded number
of GPUs a node. Nothing in their environment says 8, so every rank "waited in
init_process_group" (all_waiting); the world_size they gave the call, read with their locals,
says that ranks 4-7 were never started."""

from __future__ import annotations

from dataclasses import replace

from snapfactory import recorded

from slurmdiag.analysis import diagnose
from slurmdiag.collector import stacks
from slurmdiag.snapshot import Rank, Snapshot

SITE = "world_size_overcount.py:27"


def _asking(snapshot: Snapshot, world: str | None, only=None) -> Snapshot:  # type: ignore[no-untyped-def]
    """Each rank's (or each rank ``only`` accepts) init_process_group world_size local replaced
    by ``world`` (None: as if not read)."""
    def groups(sample):  # type: ignore[no-untyped-def]
        if world is None:
            return tuple(g for g in sample.groups if g[1] != "world_size")
        return tuple((i, name, world if name == "world_size" else text)
                     for i, name, text in sample.groups)

    def change(rank: Rank) -> Rank:
        if only is not None and not only(rank):
            return rank
        return replace(rank, samples=tuple(replace(s, groups=groups(s)) for s in rank.samples))
    return replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(change(r) for r in n.ranks)) for n in snapshot.nodes))


def test_ranks_beyond_the_world_started_were_never_started() -> None:
    # GIVEN the recorded look: ranks 0-3 in init_process_group(world_size=8)
    snapshot = recorded("world_size_overcount.default")
    # WHEN it is diagnosed
    verdict = diagnose(snapshot).verdicts[0]
    # THEN ranks 4-7 are named as never started, at the call that asked for them
    assert verdict.kind == "missing_rank" and verdict.culprit_ranks == (4, 5, 6, 7)
    assert "never started" in verdict.summary and "world of 8" in verdict.summary
    assert verdict.sites[0].endswith(SITE)
    assert "world size" in verdict.next_step


def test_a_world_asked_as_large_as_the_launch_is_a_rendezvous_wait() -> None:
    # GIVEN the liars: the same ranks asking for the world the job started (4: a slow
    # rendezvous, a rank late), or the call's world size not read
    for world in ("4", None):
        verdict = diagnose(_asking(recorded("world_size_overcount.default"), world)).verdicts[0]
        # THEN no rank is called missing: every rank waits in the rendezvous
        assert verdict.kind == "all_waiting" and verdict.culprit_ranks == ()


def test_ranks_that_disagree_on_the_world_asked_say_nothing() -> None:
    # GIVEN rank 0 asking for 8 and the others for 4
    snapshot = recorded("world_size_overcount.default")
    mixed = _asking(snapshot, "4", only=lambda rank: rank.rank != 0)
    # THEN no world is taken from the calls
    assert diagnose(mixed).verdicts[0].kind == "all_waiting"


def test_the_collector_keeps_the_world_a_rank_asked_init_process_group_for() -> None:
    # GIVEN py-spy --locals of a rank's main thread in init_process_group's rendezvous
    threads = [{"os_thread_id": 7, "frames": [
        {"name": "_create_c10d_store", "filename": "/x/torch/distributed/rendezvous.py",
         "locals": [{"name": "world_size", "repr": "8"}, {"name": "port", "repr": "29500"}]},
        {"name": "init_process_group", "filename": "/x/torch/distributed/distributed_c10d.py",
         "locals": [{"name": "world_size", "repr": "8"}, {"name": "rank", "repr": "3"},
                    {"name": "backend", "repr": '"gloo"'}]},
        {"name": "main", "filename": "/job/train.py",
         "locals": [{"name": "world_size", "repr": "8"}]},
    ]}]
    # THEN the init frame's world size and rank are kept, nobody else's
    assert stacks.group_locals(threads, 7) == [[1, "world_size", "8"], [1, "rank", "3"]]

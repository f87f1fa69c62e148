"""Ranks waiting for a FUSE file system that does not answer (`stalled_mount_read`, a real
`--samples 1` look from `make accuracy`: ranks 2-3 in read() on the mount, wchan
request_wait_answer, state D after the default look before it; ranks 0-1 in all_reduce)."""

from __future__ import annotations

from dataclasses import replace

from snapfactory import map_rank, recorded

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Rank

LOOK = "stalled_mount_read.samples1"


def _both(snapshot, change):  # type: ignore[no-untyped-def]
    return map_rank(map_rank(snapshot, 2, change), 3, change)


def test_the_fuse_wait_is_named_with_the_files_and_the_mount_to_look_at() -> None:
    verdict = diagnose(recorded(LOOK)).verdicts[0]
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (2, 3))
    assert verdict.summary.startswith(
        "ranks 2-3 are waiting for a FUSE file system that does not answer "
        "(request_wait_answer) at ")
    assert verdict.sites[0].endswith("tests/scenarios/stalled_mount_read.py:35")
    assert "FUSE file system whose server" in verdict.next_step
    assert [line.split(" in read on ")[1].rsplit("/", 1)[1] for line in verdict.evidence
            if " in read on " in line] == ["shard-2-0003.bin", "shard-3-0003.bin"]


def _no_stack(rank: Rank) -> Rank:
    return replace(rank, samples=tuple(replace(s, threads=()) for s in rank.samples))


def test_without_a_stack_the_wait_is_still_named() -> None:
    # GIVEN the ranks whose dump failed (py-spy's suspend timed out, before the collector read
    # such ranks without it)
    verdict = diagnose(_both(recorded(LOOK), _no_stack)).verdicts[0]
    assert verdict.culprit_ranks == (2, 3)
    assert "waiting for a FUSE file system that does not answer" in verdict.summary


def test_its_liar_another_kernel_wait_in_state_d_stays_a_kernel_wait() -> None:
    # GIVEN the same ranks in state D on a disk or NFS wait (no FUSE request)
    verdict = diagnose(_both(recorded(LOOK), lambda r: replace(r, wchan="rpc_wait_bit_killable"))
                       ).verdicts[0]
    assert verdict.culprit_ranks == (2, 3)
    assert "uninterruptible kernel sleep (state D)" in verdict.summary
    assert "FUSE" not in verdict.summary + verdict.next_step

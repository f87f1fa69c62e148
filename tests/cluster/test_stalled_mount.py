"""A node's file system that stops answering under a running job (`stalled_mount_read`): ranks
2-3 wait in the kernel inside read() on a FUSE mount (tests/scenarios/_stalled_mount.py) whose
server never answers, ranks 0-1 in the gradient all_reduce.

Such a wait is interruptible until something interrupts it, then uninterruptible for good: a
blocking py-spy dump's suspend never completes (it waited for its 10 s timeout and left no
stack; the reader was in state D from then on). So the first look is the one that matters, and
it is the one-sample look without strace: it must read the ranks without suspending them.
"""

from __future__ import annotations

import os

import pytest
from scenarios.launch import submit

from slurmdiag.api import attach_job
from slurmdiag.options import AttachOptions

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no FUSE on this host")]


def test_ranks_waiting_on_a_mount_that_does_not_answer_are_read_and_named(
        local_cluster, tmp_path):
    run = submit("stalled_mount_read", tmp_path / "state")
    try:
        ranks = run.wait_ready(timeout=120)
        # WHEN the first look is one sample, no strace: every rank read with py-spy's suspend
        # but those it cannot suspend
        snapshot = attach_job(run.job_id, AttachOptions(samples=1, strace_s=0),
                              write=False).snapshot
    finally:
        run.cancel()
    by_rank = {r.rank: r for _, r in snapshot.all_ranks()}
    # THEN ranks 2-3 were read, with a stack, and without a suspend: the state the collector
    # read after the dumps is still S (a suspend tried would have left them in D for good)
    for rank in (2, 3):
        sample = by_rank[rank].samples[0]
        assert sample.threads and sample.error is None, sample
        assert by_rank[rank].wchan == "request_wait_answer"
        assert (by_rank[rank].state or "").startswith("S"), by_rank[rank].state
    # AND the verdict names them, at the read, the file each reads, and the mount to look at
    verdict = snapshot.verdicts[0]
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (2, 3)), verdict
    assert verdict.sites[0].endswith("stalled_mount_read.py:35"), verdict.sites
    assert "FUSE file system that does not answer" in verdict.summary
    assert "check that server process" in verdict.next_step
    for rank in (2, 3):
        assert any(line.startswith(f"rank {rank}: thread MainThread")
                   and line.endswith(f"in read on {run.state_dir}/dataset/shard-{rank}-0003.bin, "
                                     "waiting for a FUSE file system that does not answer "
                                     "(request_wait_answer)")
                   for line in verdict.evidence), verdict.evidence
    assert {n.name for n, r in snapshot.all_ranks() if r.rank in (2, 3)} == {ranks[2]["node"]}

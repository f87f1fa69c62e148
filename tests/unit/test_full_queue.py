"""A rank parked in a queue's put (`fsdp_grad_hook_blocked`, recorded by `make accuracy`): its
gradient hook hands a norm to a metrics thread through a one-slot queue whose consumer died.
It was said "blocked on a lock" (Queue.put waits on the queue's condition), with the lock's
next step (find the thread that holds it); nothing holds a lock there, the queue is full."""

from __future__ import annotations

from dataclasses import replace

from snapfactory import recorded

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Frame


def test_a_rank_in_queue_put_is_blocked_on_a_full_queue() -> None:
    # GIVEN the recorded look: rank 2's main thread in Queue.put inside loss.backward()
    verdict = diagnose(recorded("fsdp_grad_hook_blocked.default")).verdicts[0]
    # THEN it is the straggler, blocked on a full queue, and the next step is its consumer's
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (2,)
    assert "blocked putting into a full queue (Queue.put) at" in verdict.summary
    assert "blocked on a lock" not in verdict.summary
    assert verdict.next_step.startswith("nothing takes from the queue")


def test_a_lock_wait_outside_a_queue_keeps_the_lock_reading() -> None:
    # GIVEN the liar: the same look with rank 2's Queue.put frame renamed to another
    # threading wait of the job's own helper (a lock, not a queue)
    snapshot = recorded("fsdp_grad_hook_blocked.default")

    def renamed(frame: Frame) -> Frame:
        if frame.file.endswith("/queue.py") and frame.function.endswith("put"):
            return replace(frame, function="Semaphore.acquire", file=frame.file.replace(
                "/queue.py", "/threading.py"))
        return frame

    nodes = []
    for node in snapshot.nodes:
        ranks = []
        for rank in node.ranks:
            if rank.rank == 2:
                samples = tuple(replace(sample, threads=tuple(
                    replace(t, frames=tuple(renamed(f) for f in t.frames))
                    for t in sample.threads or ())) for sample in rank.samples)
                rank = replace(rank, samples=samples)
            ranks.append(rank)
        nodes.append(replace(node, ranks=tuple(ranks)))
    verdict = diagnose(replace(snapshot, nodes=tuple(nodes))).verdicts[0]
    # THEN it is still the straggler, on a lock
    assert verdict.culprit_ranks == (2,) and "blocked on a lock at" in verdict.summary
    assert not verdict.next_step.startswith("nothing takes from the queue")

"""A model served with torch.distributed, idle between requests, is no hang (real looks:
`healthy_generation_server`, Megatron-LM's text generation server in small, and its hung twin
`generation_server_worker_stuck`).

Rank 0 serves HTTP on its main thread (socketserver's accept loop) and broadcasts each request's
command to the other ranks, which loop on that broadcast: while no request comes, rank 0 sits
in a select on its listening socket and ranks 1-3 in the broadcast, the sight of
`accept_no_client` (a rank in accept() for a client that never comes). It was a critical
straggler verdict on a healthy service."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from snapfactory import map_every_rank, recorded

from slurmdiag.analysis import diagnose
from slurmdiag.snapshot import Rank, Snapshot


def _without_locals(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with no process-group locals read (the broadcast's root unknown)."""
    def change(rank: Rank) -> Rank:
        return replace(rank, samples=tuple(replace(x, groups=()) for x in rank.samples))
    return map_every_rank(snapshot, change)


def test_an_idle_service_is_said_as_one() -> None:
    verdicts = diagnose(recorded("healthy_generation_server.samples1")).verdicts
    assert all(v.severity == "info" for v in verdicts)
    verdict = verdicts[0]
    assert (verdict.kind, verdict.culprit_ranks) == ("idle", (0,))
    assert verdict.summary.startswith(
        "a service waiting for its clients, not a hang: rank 0 serves requests in "
        "BaseServer.serve_forever (socketserver.py) at ")
    assert "while ranks 1-3 wait in broadcast at " in verdict.summary
    # (the serve_forever() line when recorded)
    assert verdict.sites[0].endswith("tests/scenarios/healthy_generation_server.py:93")


def test_workers_not_known_to_wait_for_the_server_leave_it_a_straggler() -> None:
    # WHEN the broadcast's root cannot be read, the waiting ranks may wait for anyone
    verdict = diagnose(_without_locals(recorded("healthy_generation_server.samples1"))).verdicts[0]
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (0,))


def test_a_request_stuck_on_a_worker_is_a_straggler_there() -> None:
    # rank 2's shard waits for a lock it left held; rank 0's handler thread waits in the
    # logits' all_reduce with ranks 1 and 3, its main thread in the accept loop
    verdict = diagnose(recorded("generation_server_worker_stuck.default")).verdicts[0]
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (2,))
    assert "thread Thread-2 (process_request_thread)" in verdict.summary
    # one all_reduce line, reached by rank 0's handler thread and by the others' main threads:
    # one collective, not "2 different collectives"
    assert not any("different collectives" in e for e in verdict.evidence), verdict.evidence


def test_a_request_stuck_on_the_servers_handler_thread_is_where_it_stops() -> None:
    # rank 0's request handler waits on a moderation service (no timeout) before the command's
    # broadcast; its main thread is in the accept loop and ranks 1-3 in the broadcast, as when
    # the service is idle
    verdict = diagnose(recorded("generation_server_request_stuck.default")).verdicts[0]
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (0,))
    # (the line of check_prompt's urlopen when recorded)
    assert verdict.sites[0].endswith("tests/scenarios/healthy_generation_server.py:106")
    assert ("(request handler thread Thread-2 (process_request_thread) in check_prompt, "
            "waiting in SocketIO.readinto; its main thread serves requests at ") in verdict.summary


def test_a_handler_in_flight_for_one_sample_only_is_a_request_being_answered() -> None:
    # WHEN the handler thread shows in the last sample only (a request answered in a moment)
    snapshot = recorded("generation_server_request_stuck.default")

    def change(rank: Rank) -> Rank:
        if rank.rank != 0:
            return rank
        *earlier, last = rank.samples
        handler = next(t.thread_id for t in last.threads
                       if (t.name or "").endswith("(process_request_thread)"))
        return replace(rank, samples=(*[replace(x, threads=tuple(
            t for t in x.threads if t.thread_id != handler)) for x in earlier], last))
    verdict = diagnose(map_every_rank(snapshot, change)).verdicts[0]
    # THEN the service is idle between requests
    assert (verdict.kind, verdict.severity) == ("idle", "info")


def test_a_handler_stuck_on_the_main_thread_inside_the_loop_is_no_idle_service() -> None:
    # rank 0's handler calls its single-threaded server's shutdown() inside serve_forever()
    # (Python's classic self-deadlock), ranks 1-3 wait in the broadcast of its weights: the
    # first version of the rule, which took any serve_forever frame for an idle service,
    # called this look idle
    verdict = diagnose(recorded("server_shutdown_deadlock.default")).verdicts[0]
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == (
        "straggler", "critical", (0,))
    assert verdict.sites[0].endswith("tests/scenarios/server_shutdown_deadlock.py:40")


def test_a_training_rank_serving_on_its_main_thread_by_mistake_is_named_in_the_next_step() -> None:
    # GIVEN serve_thread_called (recorded before the node read its line): rank 0 ran
    # Thread(target=server.serve_forever()) after epoch 0, so it serves on its main thread;
    # ranks 1-3 wait in the next epoch's broadcast of its seed from rank 0: the stacks alone
    # are an idle service's
    verdict = diagnose(recorded("serve_thread_called.default")).verdicts[0]
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == ("idle", "info", (0,))
    # THEN the culprit's line is the one that started the server, and the next step says how
    # to tell the two apart
    assert verdict.sites[0].endswith("tests/scenarios/serve_thread_called.py:43")
    assert "If the job trains rather than serves" in (verdict.next_step or "")
    assert "Thread(target=server.serve_forever())" in (verdict.next_step or "")


def _called_at(rank_no: int, place_of: Callable[[Rank], str]) -> Callable[[Rank], Rank]:
    def change(rank: Rank) -> Rank:
        return replace(rank, called_target=place_of(rank)) if rank.rank == rank_no else rank
    return change


def _line_43(rank: Rank) -> str:
    frames = rank.samples[-1].threads[0].frames
    file = next(f.file for f in frames if f.file.endswith("serve_thread_called.py"))
    return f"{file}:43"


def test_a_thread_target_called_on_the_main_thread_is_a_straggler_at_that_line() -> None:
    # GIVEN the same look, with what the node reads of rank 0's line 43 since session 33:
    # it passes serve_forever's call as the Thread's target (called_target)
    snapshot = map_every_rank(recorded("serve_thread_called.default"), _called_at(0, _line_43))
    verdict = diagnose(snapshot).verdicts[0]
    # THEN no idle service: rank 0 is the critical straggler, at that line, said as the mistake
    assert (verdict.kind, verdict.severity, verdict.culprit_ranks) == (
        "straggler", "critical", (0,))
    assert verdict.sites[0].endswith("tests/scenarios/serve_thread_called.py:43")
    assert verdict.summary.startswith(
        "rank 0 runs a thread's target on its main thread: ")
    assert "passes the call serve_forever() as the target" in verdict.summary
    assert "while ranks 1-3 wait in broadcast" in verdict.summary
    assert "target=serve_forever without the parentheses" in (verdict.next_step or "")


def test_a_called_target_off_the_stack_changes_nothing() -> None:
    # GIVEN the healthy service, its rank 0 said to have called a target at a line that is no
    # frame of its stack (a reading from another moment): the service stays idle, not hung
    snapshot = map_every_rank(recorded("healthy_generation_server.samples1"),
                              _called_at(0, lambda rank: "/elsewhere/train.py:1"))
    verdicts = diagnose(snapshot).verdicts
    assert verdicts[0].kind == "idle"
    assert all(v.severity == "info" for v in verdicts)

def _job_caller(rank: Rank) -> str:
    """The first frame of the job's code (innermost first) that calls another function."""
    frames = rank.samples[-1].threads[0].frames
    caller = next(f for f in frames[1:] if "/tests/scenarios/" in f.file)
    return f"{caller.file}:{caller.line}"


def test_a_called_target_that_may_be_a_factory_is_said_as_what_it_can_be() -> None:
    # GIVEN a straggler blocked in the job's own function (zero_optimizer_straggler's rank 2,
    # recorded),
    # said to be inside a call its caller's line passed as a target: no server's loop, so the
    # call may be a factory returning the thread's function (target=make_worker(cfg))
    # (its log's traceback of a dead thread left out: that verdict's next step would be about it)
    snapshot = replace(recorded("zero_optimizer_straggler.default"), log_findings=())
    snapshot = map_every_rank(snapshot, _called_at(2, _job_caller))
    caller = _job_caller(next(r for _, r in snapshot.all_ranks() if r.rank == 2))
    verdict = diagnose(snapshot).verdicts[0]
    # THEN the straggler stays rank 2, its caller's line first, and the factory is left open
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (2,))
    assert verdict.sites[0] == caller
    assert "is a factory that returns the function)" in verdict.summary
    assert "(a factory), the rank is held inside it" in (verdict.next_step or "")
    # AND a server's loop is said without that doubt
    served = map_every_rank(recorded("serve_thread_called.default"), _called_at(0, _line_43))
    assert "factory" not in diagnose(served).verdicts[0].summary


def test_a_server_loop_called_as_a_target_is_critical_from_one_sample() -> None:
    # GIVEN serve_thread_called's look cut to its last sample (a --samples 1 look), rank 0's
    # called target read
    def last_only(rank: Rank) -> Rank:
        return replace(rank, samples=rank.samples[-1:])
    snapshot = map_every_rank(recorded("serve_thread_called.default"), last_only)
    plain = diagnose(snapshot).verdicts[0]
    called = diagnose(map_every_rank(snapshot, _called_at(0, _line_43))).verdicts[0]
    # THEN without the reading the look is no critical verdict (a straggler of one sample is a
    # warning), but the loop called there is critical: it returns only on a shutdown()
    assert plain.severity != "critical", plain
    assert (called.kind, called.severity, called.culprit_ranks) == ("straggler", "critical", (0,))


def test_a_called_server_loop_commanding_the_others_says_a_service_would_serve_anyway() -> None:
    # GIVEN serve_thread_called with its line read: ranks 1-3 wait in a broadcast from rank 0,
    # the shape of a service's workers waiting for its command (healthy_service_thread_called)
    snapshot = map_every_rank(recorded("serve_thread_called.default"), _called_at(0, _line_43))
    verdict = diagnose(snapshot).verdicts[0]
    # THEN the straggler stays (a training job is hung there), and its evidence says what the
    # same line does in a service
    assert verdict.kind == "straggler"
    assert any(e.startswith("if the job is a service (ranks 1-3 wait for rank 0's command), "
                            "it serves anyway") for e in verdict.evidence), verdict.evidence

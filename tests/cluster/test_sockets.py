"""A real gloo job's TCP mesh as the collector reads it (copies of the ranks' descriptors), and
the default options' overlapped strace on its ranks."""

from __future__ import annotations

import pytest

from slurmdiag.api import collect_snapshot
from slurmdiag.options import AttachOptions
from slurmdiag.slurm.discover import discover_job, job_ref_from_user
from slurmdiag.transport.run import run_command
from slurmdiag.transport.srun import SrunTransport

pytestmark = [pytest.mark.cluster, pytest.mark.scenario("mismatched_collectives")]


def test_the_ranks_peer_connections_of_a_gloo_job_are_found(scenario_run):
    # GIVEN a real gloo job of 4 ranks on 2 nodes, hung in a mismatched collective
    run = scenario_run("mismatched_collectives")
    pids = {int(record["pid"]): rank for rank, record in run.rank_records().items()}
    job = discover_job(job_ref_from_user(run.job_id), run_command)
    # WHEN the collector runs on its nodes
    fanout = SrunTransport().collect(job.job_id, job.nodes, AttachOptions(samples=1, strace_s=0))
    docs = [fanout.nodes[name].document for name in job.nodes]
    assert all(docs), [(o.name, o.status, o.message) for o in fanout.nodes.values()]
    # THEN every node read the sockets through copies of the processes' own descriptors
    assert {doc["sockets_read_with"] for doc in docs} == {"descriptors"}
    ranks = {pids[p["pid"]]: p for doc in docs for p in doc["processes"] if p["role"] == "rank"}
    assert set(ranks) == {0, 1, 2, 3}
    # AND each rank holds an established connection to each of the other three (gloo's full
    # mesh): one end's local endpoint is the other end's remote
    owner = {c["local"]: rank for rank, p in ranks.items() for c in p["connections"]
             if c["state"] == "ESTABLISHED"}
    for rank, process in ranks.items():
        peers = {owner.get(c["remote"]) for c in process["connections"]
                 if c["state"] == "ESTABLISHED"}
        assert peers - {None, rank} == {0, 1, 2, 3} - {rank}, (rank, process["connections"])
        assert all(c["interface"] == "lo" for c in process["connections"]
                   if c["state"] == "ESTABLISHED"), process["connections"]
    # AND rank 0 holds the listening sockets (the TCP store, gloo's own)
    assert any(c["state"] == "LISTEN" for c in ranks[0]["connections"])


def test_default_options_trace_the_ranks_during_the_later_samples(scenario_run):
    # GIVEN the same hung gloo job
    run = scenario_run("mismatched_collectives")
    # WHEN attached with the default options (3 samples 1 s apart, 2 s of strace)
    snapshot, _ = collect_snapshot(run.job_id)
    ranks = [r for _, r in snapshot.all_ranks()]
    # THEN each rank has its three stacks (the later two read without suspending the rank, as
    # strace traced it meanwhile) and its strace summary of a full window
    assert len(ranks) == 4
    for rank in ranks:
        assert len(rank.samples) == 3 and all(s.threads for s in rank.samples), rank.samples
        assert rank.strace is not None and rank.strace.status == "ok", rank.strace
        assert rank.strace.window_s >= 1.9
    # AND each node's collector was done well before sampling plus strace one after the other
    # (2 s + 2 s) would have taken
    assert all(n.duration_s is not None and n.duration_s < 3.5 for n in snapshot.nodes), [
        (n.name, n.duration_s) for n in snapshot.nodes]

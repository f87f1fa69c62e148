"""A link that drops packets under a running torch job: every rank waits in the same all_reduce,
the NICs are up, and only the connections say where the bytes stopped (`link_blackholed`).

Four Slurm nodes, each its own network namespace (tests/support/netns_cluster.py); gloo over
the data network (eth1), the store and Slurm over eth0. The fault: a blackhole route on rank 2's
node to rank 3's node's data address, added once every rank trains.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from scenarios.launch import submit
from support.netns_cluster import blackhole, four_node_cluster, slow_link

from slurmdiag.snapshot import Snapshot

pytestmark = pytest.mark.cluster

@pytest.fixture(scope="module")
def cluster(local_cluster, tmp_path_factory):
    with four_node_cluster(tmp_path_factory.mktemp("stall-netns")) as c:
        yield c


def attach(job_id: str, env: dict[str, str], out: str) -> Snapshot:
    done = subprocess.run([sys.executable, "-m", "slurmdiag", "attach", job_id, "--json",
                           "--no-report", "--out", out], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return Snapshot.from_json(done.stdout)


def test_a_link_that_drops_packets_is_named_under_a_job_waiting_in_one_collective(
        cluster, tmp_path, monkeypatch):
    env = {**cluster.env(), "GLOO_SOCKET_IFNAME": "eth1"}
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))  # submit's sbatch and squeue
    run = submit("link_blackholed", tmp_path / "state", env=env)
    try:
        ranks = run.wait_ready(timeout=300)
        node_of = {rank: info["node"] for rank, info in ranks.items()}
        # GIVEN the job training (checked: a look before the fault finds no hang)
        healthy = attach(run.job_id, env, str(tmp_path / "before"))
        assert [v.kind for v in healthy.verdicts if v.severity in ("critical", "warning")] == [], \
            [(v.kind, v.summary) for v in healthy.verdicts]
        # WHEN rank 2's node drops what it sends to rank 3's node's data address, and the
        # job has stalled on it
        with blackhole(node_of[2], cluster.data[node_of[3]]):
            time.sleep(4.0)  # past the stall's first RTOs (STALL_MS: 1 s without an ack)
            stalled = attach(run.job_id, env, str(tmp_path / "after"))
    finally:
        run.cancel()
    # THEN every rank waits in the one all_reduce, and the verdict names the link's two ends
    verdict = stalled.verdicts[0]
    assert verdict.kind == "all_waiting", (verdict.kind, verdict.summary)
    assert verdict.culprit_ranks == (2, 3), verdict
    pair = " and ".join(sorted((node_of[2], node_of[3])))
    assert f"the network between {pair} loses packets" in verdict.summary, verdict.summary
    assert any(line.startswith(f"rank 3 ({node_of[3]}) -> rank 2 ({node_of[2]}): ")
               and "unacknowledged" in line for line in verdict.evidence), verdict.evidence
    assert "slurmdiag probe" in verdict.next_step
    # AND no interface is said to be down: the NICs are up, the path drops
    assert not [v for v in stalled.verdicts if v.kind == "nic_down"]


def test_a_slow_link_under_a_job_that_still_moves_is_no_stall(cluster, tmp_path, monkeypatch):
    env = {**cluster.env(), "GLOO_SOCKET_IFNAME": "eth1"}
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    run = submit("link_blackholed", tmp_path / "state", env=env)
    try:
        ranks = run.wait_ready(timeout=300)
        node_of = {rank: info["node"] for rank, info in ranks.items()}
        # GIVEN the link from rank 2's node to rank 3's limited to 20 kbit/s, a short queue
        # (packets dropped and retransmitted, acknowledged as they get through): the job's
        # steps slow down, every rank often caught in the all_reduce
        with slow_link(node_of[2], "eth1", cluster.data[node_of[3]], rate="20kbit"):
            time.sleep(3.0)
            snapshot = attach(run.job_id, env, str(tmp_path / "slow"))
    finally:
        run.cancel()
    # THEN no hang verdict, and no link said to lose packets: what it carries gets through
    hangs = [v for v in snapshot.verdicts if v.severity in ("critical", "warning")]
    assert hangs == [], [(v.kind, v.summary) for v in hangs]
    assert not any("loses packets" in v.summary for v in snapshot.verdicts)


def test_a_node_that_cannot_reach_the_store_is_named_in_the_rendezvous(cluster, tmp_path,
                                                                       monkeypatch):
    # GIVEN the store on node 1's data address, and rank 2's node dropping what it sends there
    # from before the job starts (store_unreachable)
    store = cluster.data["nsnode1"]
    env = {**cluster.env(), "GLOO_SOCKET_IFNAME": "eth1", "SLURMDIAG_SCENARIO_MASTER_ADDR": store}
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    with blackhole("nsnode3", store):
        run = submit("store_unreachable", tmp_path / "state", env=env)
        try:
            ranks = run.wait_ready(timeout=300)
            assert {r: info["node"] for r, info in ranks.items()}[2] == "nsnode3"
            time.sleep(3.0)  # every rank inside init_process_group
            snapshot = attach(run.job_id, env, str(tmp_path / "look"))
        finally:
            run.cancel()
    # THEN rank 2 is named: it never reached the store the others met at
    verdict = snapshot.verdicts[0]
    assert (verdict.kind, verdict.culprit_ranks) == ("straggler", (2,)), (verdict.kind,
                                                                           verdict.summary)
    assert verdict.summary.startswith("rank 2 never reached the rendezvous"), verdict.summary
    assert verdict.sites[0].endswith("store_unreachable.py:24"), verdict.sites
    assert "MASTER_ADDR" in verdict.next_step

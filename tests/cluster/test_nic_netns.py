"""Real NIC faults: nodes with their own network stacks, one with a smaller MTU."""

from __future__ import annotations

import pytest
from scenarios.launch import submit
from support.netns_cluster import available, start_netns_cluster

from slurmdiag.api import attach_job
from slurmdiag.options import AttachOptions

pytestmark = pytest.mark.cluster

MTUS = {"nsnode1": 1500, "nsnode2": 1400}


@pytest.fixture(scope="module")
def netns_cluster(local_cluster, tmp_path_factory):
    problem = available()
    if problem:
        pytest.skip(f"network namespaces unavailable here: {problem}")
    cluster = start_netns_cluster(tmp_path_factory.mktemp("netns-cluster"), MTUS)
    yield cluster
    cluster.stop()


@pytest.fixture
def hung_job_across_namespaces(netns_cluster, monkeypatch, tmp_path):
    # Every Slurm command of this test (launch helper, attach) goes to the namespaced cluster.
    monkeypatch.setenv("SLURM_CONF", str(netns_cluster.conf))
    # gloo must bind the node's own eth0 (the host name resolves to no address in a namespace)
    run = submit("rank_gated_collective", tmp_path, env={"GLOO_SOCKET_IFNAME": "eth0"})
    try:
        run.wait_ready(timeout=120)
        yield run
    finally:
        run.cancel()


def test_mtu_mismatch_between_nodes_is_found_from_what_the_nodes_see(
    netns_cluster, hung_job_across_namespaces
):
    # WHEN attaching to a real gloo job spread over the two namespaced nodes
    result = attach_job(
        hung_job_across_namespaces.job_id, AttachOptions(samples=2, interval_s=0.5, strace_s=0),
        write=False)
    snapshot = result.snapshot
    # THEN each node reported its own eth0 (its own address and MTU), not the host's
    by_node = {n.name: n for n in snapshot.nodes}
    for name, address in netns_cluster.nodes.items():
        eth0 = next(i for i in by_node[name].nics.interfaces if i.name == "eth0")
        assert eth0.mtu == MTUS[name]
        assert any(a.startswith(address + "/") for a in eth0.addresses), eth0.addresses
    # AND the ranks' gloo connections between nodes go through eth0
    established = [c for _, r in snapshot.all_ranks() for c in r.connections
                   if c.state == "ESTABLISHED" and not c.remote.startswith("127.")]
    assert established
    assert {c.interface for c in established} == {"eth0"}, established
    # AND the MTU mismatch is reported next to the hang verdict
    assert snapshot.verdicts[0].kind == "mismatched_collective"
    mtu = [v for v in snapshot.verdicts if v.kind == "nic_mtu_mismatch"]
    assert mtu, [(v.kind, v.summary) for v in snapshot.verdicts]
    assert "1400" in mtu[0].summary + " ".join(mtu[0].evidence)

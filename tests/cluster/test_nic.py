"""NIC findings from what the collectors really read on the nodes (interfaces, rank environment)."""

from __future__ import annotations

import pytest
from scenarios.launch import submit

from slurmdiag.api import attach_job

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def misconfigured_job(local_cluster, tmp_path_factory):
    # A healthy job launched with NCCL pointed at devices the nodes do not have (gloo ignores
    # these variables, so the job runs; an NCCL job would fail or pick the wrong NIC).
    run = submit("healthy_slow", tmp_path_factory.mktemp("nic"),
                 env={"NCCL_SOCKET_IFNAME": "=ib0", "NCCL_IB_HCA": "mlx5_9"})
    try:
        run.wait_ready(timeout=120)
        yield run
    finally:
        run.cancel()


def test_nccl_variables_naming_missing_devices_are_found(misconfigured_job):
    # WHEN attaching to it
    snapshot = attach_job(misconfigured_job.job_id, write=False, samples=2, interval=0.5,
                          strace_s=0).snapshot
    # THEN the real interface lists of the nodes lack ib0, and both variables are reported
    interfaces = {i.name for n in snapshot.nodes for i in n.nics.interfaces}
    assert "lo" in interfaces and "ib0" not in interfaces
    found = [v for v in snapshot.verdicts if v.kind == "nic_env_missing_device"]
    text = " ".join(v.summary for v in found)
    assert "NCCL_SOCKET_IFNAME" in text and "NCCL_IB_HCA" in text, found
    assert all(v.next_step for v in found)
    # AND the job itself is not called hung
    assert not [v for v in snapshot.verdicts if v.kind in (
        "mismatched_collective", "straggler", "spinning", "missing_rank", "all_waiting")]

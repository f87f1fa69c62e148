"""The ssh transport against a real OpenSSH server on loopback and a real hung job."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.sshd import start_sshd

from slurmdiag.api import collect_snapshot
from slurmdiag.options import AttachOptions, SshSettings

pytestmark = [pytest.mark.cluster, pytest.mark.ssh]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory, local_cluster):
    # Every emulated node has NodeAddr 127.0.0.1, so one sshd serves them all.
    server = start_sshd(tmp_path_factory.mktemp("sshd"),
                        {"SLURM_CONF": local_cluster["SLURM_CONF"]})
    yield server
    server.stop()


def over_ssh(settings: SshSettings) -> AttachOptions:
    return AttachOptions(samples=1, strace_s=0, transport="ssh", ssh=settings)


def ssh_options(server, known_hosts: Path, accept_new: bool = False) -> SshSettings:
    return SshSettings(port=server.port, user="root", key_filename=str(server.user_key),
                       known_hosts=str(known_hosts), accept_new=accept_new)


def test_ssh_transport_finds_every_rank(scenario_run, sshd, tmp_path):
    # GIVEN a hung job and nodes whose host key is known
    run = scenario_run("rank_gated_collective")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(sshd.known_hosts_line())
    # WHEN attaching over ssh instead of srun
    snapshot, _ = collect_snapshot(run.job_id, over_ssh(ssh_options(sshd, known_hosts)))
    # THEN every node answered over ssh and every rank is there with its stack
    assert snapshot.transport == "ssh"
    assert all(n.status == "ok" for n in snapshot.nodes), [(n.name, n.message) for n in snapshot.nodes]
    ranks = sorted(r.rank for _, r in snapshot.all_ranks())
    assert ranks == list(range(run.truth["world_size"]))
    assert all(r.samples[0].threads for _, r in snapshot.all_ranks())


def test_unknown_host_key_is_refused(scenario_run, sshd, tmp_path):
    # GIVEN an empty known_hosts and no --ssh-accept-new
    run = scenario_run("rank_gated_collective")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    snapshot, _ = collect_snapshot(run.job_id, over_ssh(ssh_options(sshd, known_hosts)))
    # THEN no node is contacted: each is unreachable with the reason and the hint
    for node in snapshot.nodes:
        assert node.status == "unreachable"
        assert "known_hosts" in node.message and "--ssh-accept-new" in node.message
    assert known_hosts.read_text() == ""


def test_changed_host_key_is_refused_even_with_accept_new(scenario_run, sshd, tmp_path):
    # GIVEN known_hosts holds a DIFFERENT key for the server
    run = scenario_run("rank_gated_collective")
    other = tmp_path / "other"
    os.system(f"ssh-keygen -q -t ed25519 -N '' -f {other}")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{sshd.port} " + " ".join((tmp_path / "other.pub").read_text().split()[:2]) + "\n")
    accepting = ssh_options(sshd, known_hosts, accept_new=True)
    snapshot, _ = collect_snapshot(run.job_id, over_ssh(accepting))
    # THEN the nodes are refused as a possible man in the middle
    for node in snapshot.nodes:
        assert node.status == "unreachable" and "CHANGED" in node.message


def test_accept_new_remembers_the_key(scenario_run, sshd, tmp_path):
    # GIVEN an empty known_hosts and --ssh-accept-new
    run = scenario_run("rank_gated_collective")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("")
    accepting = ssh_options(sshd, known_hosts, accept_new=True)
    snapshot, _ = collect_snapshot(run.job_id, over_ssh(accepting))
    # THEN the nodes answer and the key is written once, like ssh's accept-new
    assert all(n.status == "ok" for n in snapshot.nodes)
    lines = [ln for ln in known_hosts.read_text().splitlines() if ln.strip()]
    assert lines == [sshd.known_hosts_line().strip()]

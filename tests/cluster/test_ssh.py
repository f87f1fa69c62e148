"""The ssh transport against a real OpenSSH server on loopback and a real hung job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.sshd import start_sshd

from slurmdiag.api import collect_snapshot
from slurmdiag.options import AttachOptions, SshSettings

pytestmark = [pytest.mark.cluster, pytest.mark.ssh]

REPO = Path(__file__).resolve().parents[2]


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


def collectors_of(job_id: str) -> dict[int, str]:
    """pid -> comm of the collectors of job ``job_id`` on this host and their tools."""
    marker = f'"job_id": "{job_id}"'.encode()
    collectors, children = set(), {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        comm = stat.split("(", 1)[1].rsplit(")", 1)[0]
        if marker in cmdline:
            collectors.add(int(entry.name))
        children[int(entry.name)] = (int(fields[1]), comm)
    return {pid: comm for pid, (ppid, comm) in children.items()
            if pid in collectors or ppid in collectors}


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def test_ctrl_c_over_ssh_signals_the_collectors_and_keeps_what_they_send(scenario_run, sshd,
                                                                         tmp_path):
    # GIVEN an attach over ssh whose collectors hold the ranks under a long strace window
    run = scenario_run("rank_gated_collective")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(sshd.known_hosts_line())
    out = tmp_path / "out"
    attach = subprocess.Popen(
        [sys.executable, "-m", "slurmdiag", "attach", run.job_id, "--transport", "ssh",
         "--ssh-user", "root", "--ssh-port", str(sshd.port), "--ssh-key", str(sshd.user_key),
         "--ssh-known-hosts", str(known_hosts), "--samples", "3", "--interval", "1",
         "--strace", "60", "--timeout", "120", "--no-report", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        wait_for(lambda: "strace" in collectors_of(run.job_id).values(), 90,
                 "strace under the collectors")
        # WHEN Ctrl-C reaches slurmdiag
        attach.send_signal(signal.SIGINT)
        _, stderr = attach.communicate(timeout=20)
    finally:
        if attach.poll() is None:
            attach.kill()
    # THEN it stops at once with exit 130 and one line saying so, no traceback
    assert attach.returncode == 130, stderr
    assert "error: interrupted" in stderr and "Traceback" not in stderr
    # AND the nodes sent their partial documents (without SIGUSR1 none would within the grace
    # period: strace holds them for 60 s): the snapshot keeps them, marked interrupted
    snapshot = json.loads((out / "snapshot.json").read_text())
    assert snapshot["options"]["interrupted"] is True and snapshot["transport"] == "ssh"
    ok = [n for n in snapshot["nodes"] if n["status"] == "ok"]
    assert ok, [(n["name"], n["status"], n["message"]) for n in snapshot["nodes"]]
    assert all("partial" in " ".join(n.get("errors", ())) for n in ok), ok
    assert all(n["ranks"] for n in ok)
    # AND no collector, py-spy or strace is left behind
    wait_for(lambda: not collectors_of(run.job_id), 10, "the collectors to end")

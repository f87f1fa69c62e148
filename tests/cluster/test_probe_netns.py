"""slurmdiag probe on real network faults: four Slurm nodes, each in its own network namespace.

Slurm talks over eth0; the probe tests eth1, a data network on a second bridge (like a job's
NCCL_SOCKET_IFNAME), so that a fault there leaves the step itself working. Each test injects
one fault, runs the probe through real srun, removes the fault, and checks that the probe named
exactly the faulty node or link, and that no probe process is left on the host.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.netns_cluster import (
    TEST_NODES,
    blackhole,
    four_node_cluster,
    in_node,
    link_down,
    mtu,
    node_pids,
    route_mtu,
    slow_link,
)

from slurmdiag.cli import main
from slurmdiag.probe.cli import probe
from slurmdiag.snapshot import Snapshot

pytestmark = pytest.mark.cluster

NODES = TEST_NODES
HOSTLIST = "nsnode[1-4]"
# the probe program's arguments (its JSON carries this key) and the torch check's script
MARKERS = (b'"xfer_s"', b"imported_s")


@pytest.fixture(scope="module")
def cluster(local_cluster, tmp_path_factory):
    with four_node_cluster(tmp_path_factory.mktemp("probe-netns")) as c:
        yield c


def probe_processes() -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmdline = fh.read()
        except OSError:
            continue
        if any(m in cmdline for m in MARKERS) and int(pid) != os.getpid():
            found.append(int(pid))
    return found


@pytest.fixture(autouse=True)
def nothing_left_running(cluster, monkeypatch) -> Iterator[None]:
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    yield
    deadline = time.monotonic() + 15
    while probe_processes() and time.monotonic() < deadline:
        time.sleep(0.5)
    left = probe_processes()
    for pid in left:  # never leak into the next test, but fail this one
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"probe processes left running: {left}"


def run(timeout_s: float = 30.0, collective: bool = False) -> Snapshot:
    return probe(nodes=HOSTLIST, ifname="eth1", timeout_s=timeout_s, collective=collective)


def named(snapshot: Snapshot) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for v in snapshot.verdicts:
        out.setdefault(v.kind, []).append(v.summary)
    return out


def test_a_clean_cluster_names_nothing(cluster):
    # WHEN probing four healthy nodes on their data network
    snapshot = run()
    probe_ = snapshot.probe
    # THEN every node took part on eth1 with its own address, every directed pair was tested
    assert {n.name: (n.status, n.interface, n.address) for n in probe_.nodes} == {
        name: ("ok", "eth1", address) for name, address in cluster.data.items()}
    assert len(probe_.links) == 12 and all(x.connect and not x.error for x in probe_.links)
    assert all(x.mtu_ok for x in probe_.links)
    assert probe_.rounds == 2
    # AND nothing is named
    assert [v.kind for v in snapshot.verdicts] == ["probe_clean"], named(snapshot)


def test_a_blackholed_route_names_that_link(cluster):
    # GIVEN nsnode1 drops what it sends to nsnode2's data address
    with blackhole("nsnode1", cluster.data["nsnode2"]):
        snapshot = run()
    # THEN the link between them is named, and no node
    assert set(named(snapshot)) == {"probe_bad_link"}, named(snapshot)
    (summary,) = named(snapshot)["probe_bad_link"]
    assert "nsnode1 <-> nsnode2" in summary
    assert "--exclude=nsnode2" in snapshot.verdicts[0].next_step


def test_an_mtu_mismatch_names_the_node(cluster):
    # GIVEN nsnode3's data interface has a smaller MTU than the others
    with mtu("nsnode3", "eth1", 1400):
        snapshot = run()
    kinds = named(snapshot)
    assert set(kinds) == {"probe_mtu_mismatch"}, kinds
    (summary,) = kinds["probe_mtu_mismatch"]
    assert "nsnode3 (1400)" in summary and "1500" in summary
    # AND the don't-fragment probes towards it were lost while TCP still connected
    lost = {(x.source, x.target) for x in snapshot.probe.links if x.mtu_ok is False}
    assert lost == {("nsnode1", "nsnode3"), ("nsnode2", "nsnode3"), ("nsnode4", "nsnode3")}
    assert all(x.connect and not x.error for x in snapshot.probe.links)
    verdict = snapshot.verdicts[0]
    assert 'scontrol update NodeName=nsnode3 State=DRAIN Reason="' in verdict.next_step


def test_a_smaller_path_mtu_on_one_route_names_that_path(cluster):
    # GIVEN nsnode1's route to nsnode2 has a smaller MTU than the interfaces (all 1500)
    with route_mtu("nsnode1", cluster.data["nsnode2"], "eth1", 1400):
        snapshot = run()
    # THEN the don't-fragment probe (and only it) fails on that path; TCP still works
    kinds = named(snapshot)
    assert set(kinds) == {"probe_path_mtu"}, kinds
    (summary,) = kinds["probe_path_mtu"]
    assert summary.startswith("path nsnode1 -> nsnode2 drops 1500-byte packets")


def test_an_interface_down_names_the_node(cluster, tmp_path, capsys):
    # WHEN the command line probes the nodes while nsnode2's eth1 is down
    with link_down("nsnode2", "eth1"):
        code = main(["probe", "--nodes", HOSTLIST, "--ifname", "eth1", "--no-collective",
                     "--timeout", "30", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    snapshot = Snapshot.from_json((tmp_path / "snapshot.json").read_text())
    kinds = named(snapshot)
    assert set(kinds) == {"probe_bad_node"}, kinds
    (summary,) = kinds["probe_bad_node"]
    assert summary.startswith("node nsnode2:") and "eth1 is down" in summary
    # THEN it exits 1 (a fault was named) and prints the line that drains the node
    assert code == 1
    assert 'scontrol update NodeName=nsnode2 State=DRAIN Reason="slurmdiag probe: interface eth1 is down"' in out


def test_a_slow_link_names_that_link(cluster):
    # GIVEN what nsnode3 sends to nsnode4 goes at 1 Mbit/s (everything else at full speed)
    with slow_link("nsnode3", "eth1", cluster.data["nsnode4"]):
        snapshot = run()
    kinds = named(snapshot)
    assert set(kinds) == {"probe_slow_link"}, kinds
    (summary,) = kinds["probe_slow_link"]
    assert "nsnode3 <-> nsnode4" in summary and "nsnode3 -> nsnode4" in summary


def announced(pid: int) -> bool:
    """The probe has started its two server threads: after its hello (what the stop at
    start may precede), its address line following at once."""
    return len(os.listdir(f"/proc/{pid}/task")) >= 3


@pytest.mark.parametrize("when", ["at_start", "after_its_address"])
def test_a_node_whose_probe_never_answers_is_named_and_the_run_stays_bounded(cluster, when):
    # GIVEN nsnode4's probe process is stopped (SIGSTOP) as soon as it runs, or once it has
    # announced its address (the others then test their links to it, and no end is sent before
    # the deadline): it neither serves its peers nor sends a result. (Stopped after its hello,
    # it was once called "output damaged in transit": a hello is a start, not a document.)
    stopped: list[int] = []
    done = threading.Event()

    def stop_probe() -> None:
        while not done.is_set() and not stopped:
            for pid in node_pids("nsnode4"):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as fh:
                        if b'"xfer_s"' not in fh.read():
                            continue
                    until = time.monotonic() + 5
                    while when != "at_start" and not announced(pid) and time.monotonic() < until:
                        time.sleep(0.001)
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
                except OSError:
                    pass
            time.sleep(0.02)

    stopper = threading.Thread(target=stop_probe, daemon=True)
    stopper.start()
    started = time.monotonic()
    try:
        snapshot = run(timeout_s=20.0)
    finally:
        done.set()
        stopper.join(5)
    elapsed = time.monotonic() - started
    assert stopped, "the probe never ran on nsnode4"
    # THEN within the deadline (plus ending the step), only nsnode4 is named
    assert elapsed < 20.0 + 12.0
    kinds = named(snapshot)
    assert set(kinds) == {"probe_bad_node"}, kinds
    (summary,) = kinds["probe_bad_node"]
    assert summary.startswith("node nsnode4:")
    by_name = {n.name: n for n in snapshot.probe.nodes}
    assert by_name["nsnode4"].status == "timeout", by_name["nsnode4"].message
    assert all(by_name[n].status == "ok" for n in ("nsnode1", "nsnode2", "nsnode3"))


def test_the_collective_check_passes_clean_and_bisects_a_broken_pair(cluster):
    # WHEN the gloo all_reduce runs across the four nodes (torch from the shared venv)
    clean = run(timeout_s=120.0, collective=True)
    assert clean.probe.collective is not None
    assert clean.probe.collective.status == "ok", clean.probe.collective
    # AND with nsnode1 unable to reach nsnode2 it fails, and the bisection names that pair
    with blackhole("nsnode1", cluster.data["nsnode2"]):
        broken = run(timeout_s=120.0, collective=True)
    c = broken.probe.collective
    assert c is not None and c.status == "failed", c
    assert c.smallest_failing == (("nsnode1", "nsnode2"),), c
    assert "probe_collective_failed" in named(broken)


@contextlib.contextmanager
def running_job(env: dict[str, str], workdir: Path, nodes: str, command: str) -> Iterator[str]:
    """A batch job whose one step (a task per node) runs ``command``; cancelled and gone after."""
    submitted = subprocess.run(
        ["sbatch", "--parsable", f"--nodelist={nodes}", f"--nodes={nodes.count(',') + 1}",
         "--ntasks-per-node=1", f"--chdir={workdir}", "--output=/dev/null",
         "--wrap", f"srun {command}"],
        env=env, capture_output=True, text=True, timeout=30, check=True)
    job_id = submitted.stdout.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the job's step runs on every node
            steps = subprocess.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i"], env=env,
                                   capture_output=True, text=True, timeout=30, check=False).stdout.split()
            if f"{job_id}.0" in steps:
                break
            time.sleep(0.5)
        time.sleep(1.0)
        yield job_id
    finally:
        subprocess.run(["scancel", job_id], env=env, timeout=30, check=False)
        end = time.monotonic() + 30
        while time.monotonic() < end and subprocess.run(
                ["squeue", "-h", "-j", job_id, "-o", "%i"], env=env, capture_output=True,
                text=True, timeout=30, check=False).stdout.strip():
            time.sleep(0.5)


def test_probe_into_a_running_job_uses_the_interface_its_ranks_are_told_to_use(cluster, tmp_path):
    # GIVEN a running job on the four nodes whose tasks carry NCCL_SOCKET_IFNAME=eth1
    env = {**cluster.env(), "NCCL_SOCKET_IFNAME": "eth1"}
    with running_job(env, tmp_path, ",".join(NODES), "sleep 300") as job_id:
        # WHEN probing the job (no --ifname)
        snapshot = probe(job_id, timeout_s=30.0, collective=False)
    # THEN every node chose eth1 from the job's environment, and found nothing wrong
    assert snapshot.job.id == job_id and snapshot.probe.mode == "job"
    assert {(n.interface, n.chosen_by) for n in snapshot.probe.nodes} == {
        ("eth1", "the job's NCCL_SOCKET_IFNAME=eth1")}, snapshot.probe.nodes
    assert [v.kind for v in snapshot.verdicts] == ["probe_clean"], named(snapshot)
    assert snapshot.probe.duration_s < 15, snapshot.probe.duration_s


CONNECTED_PAIR = """python3 -c "
import os, socket, time
if os.environ['SLURM_PROCID'] == '0':
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('0.0.0.0', 29555)); s.listen(1); c, _ = s.accept()
else:
    for _ in range(200):
        try:
            c = socket.create_connection(('{address}', 29555)); break
        except OSError:
            time.sleep(0.1)
time.sleep(300)
"
"""


def connected(node: str, port: int) -> bool:
    """An established TCP connection to ``port`` in the node's namespace."""
    table = in_node(node, "cat", "/proc/net/tcp").stdout.splitlines()[1:]
    return any(f":{port:04X} " in f"{line.split()[2]} " and line.split()[3] == "01"
               for line in table if len(line.split()) > 3)


def test_probe_into_a_job_without_variables_follows_its_connections(cluster, tmp_path):
    # GIVEN a job whose two tasks hold a TCP connection over the data network, no NCCL/GLOO
    # variables, and no default route in the namespaces (eth0 would be the first guess)
    command = CONNECTED_PAIR.format(address=cluster.data["nsnode1"])
    with running_job(cluster.env(), tmp_path, "nsnode1,nsnode2", command) as job_id:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not connected("nsnode2", 29555):
            time.sleep(0.5)
        assert connected("nsnode2", 29555), "the job's tasks never connected"
        snapshot = probe(job_id, timeout_s=30.0, collective=False)
    # THEN each node tests the interface its connection goes through
    chosen = {n.name: (n.interface, n.chosen_by) for n in snapshot.probe.nodes}
    assert chosen == {name: ("eth1", f"the job's connections (from {cluster.data[name]})")
                      for name in ("nsnode1", "nsnode2")}, chosen
    assert [v.kind for v in snapshot.verdicts] == ["probe_clean"], named(snapshot)

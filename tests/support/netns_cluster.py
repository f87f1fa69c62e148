"""A small Slurm cluster whose nodes have their own network stacks: real NIC faults for tests.

One bridge on the host, one network namespace per node with a veth ``eth0`` on it, slurmctld on
the bridge address, each slurmd started with ``nsenter --net=/run/netns/NAME`` (``ip netns exec``
remounts /sys and breaks slurmd). A step's tasks then see their node's own interfaces, so a
fault set on one namespace (an MTU, a missing interface) is what the collectors really read.
Addresses are the project's own test hosts, inside namespaces this fixture makes and removes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

BRIDGE = "sdbr0"
SUBNET = "10.213.7"
DATA_BRIDGE = "sdbr1"  # the optional data network (eth1): what NCCL/gloo would use
CTLD_PORT = 6987
SLURMD_PORT = 18701


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=check)


@dataclass
class NetnsCluster:
    directory: Path
    nodes: dict[str, str]  # node name -> address
    processes: list[subprocess.Popen] = field(default_factory=list)
    data: dict[str, str] = field(default_factory=dict)  # node name -> eth1 address (data network)

    @property
    def conf(self) -> Path:
        return self.directory / "slurm.conf"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
        env["SLURM_CONF"] = str(self.conf)
        return env

    def stop(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10  # for all of them: one slow slurmd each cost 10 s
        for proc in self.processes:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        # Job processes started by the slurmds live on in the namespaces: end them too.
        for name in self.nodes:
            pids = sh("ip", "netns", "pids", _netns(name), check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        teardown_network(self.nodes)


def _netns(node: str) -> str:
    return f"sd-{node}"


def teardown_network(nodes: dict[str, str] | list[str]) -> None:
    for name in nodes:
        sh("ip", "netns", "del", _netns(name), check=False)
        sh("ip", "link", "del", f"sdv-{name}"[:15], check=False)
        sh("ip", "link", "del", f"sdd-{name}"[:15], check=False)
    sh("ip", "link", "del", BRIDGE, check=False)
    sh("ip", "link", "del", DATA_BRIDGE, check=False)


#: Node addresses are SUBNET.11 to SUBNET.254.
MAX_NODES = 244


def check_node_names(names: list[str]) -> None:
    """Raise ValueError unless every node can have its own address and interface names (Linux
    cuts interface names at 15 characters: two long names could give one veth)."""
    if len(names) > MAX_NODES:
        raise ValueError(f"{len(names)} nodes: at most {MAX_NODES} fit in {SUBNET}.0/24")
    for prefix in ("sdv-", "sdd-"):
        ends = [f"{prefix}{n}"[:15] for n in names]
        if len(set(ends)) != len(ends):
            raise ValueError(f"node names too long: their veth names collide ({ends})")


def slurm_conf(directory: Path, nodes: dict[str, str], *, ctld_port: int = CTLD_PORT,
               slurmd_port: int = SLURMD_PORT, cluster_name: str = "slurmdiagns") -> str:
    """slurm.conf of a cluster whose nodes (name -> address) each listen on their own address,
    all on ``slurmd_port``; slurmctld on the bridge's address."""
    host = (socket.gethostname() or "localhost").split(".")[0]
    node_lines = "\n".join(
        f"NodeName={n} NodeHostname=localhost NodeAddr={a} Port={slurmd_port} CPUs=8 State=UNKNOWN"
        for n, a in nodes.items()
    )
    return (
        f"ClusterName={cluster_name}\nSlurmctldHost={host}({SUBNET}.1)\nSlurmctldPort={ctld_port}\n"
        "SlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\nCryptoType=crypto/munge\n"
        "MpiDefault=none\nMailProg=/bin/true\n"
        f"StateSaveLocation={directory}/state\nSlurmctldPidFile={directory}/run/slurmctld.pid\n"
        f"SlurmctldLogFile={directory}/log/slurmctld.log\nSlurmdSpoolDir={directory}/spool/%n\n"
        f"SlurmdPidFile={directory}/run/slurmd-%n.pid\nSlurmdLogFile={directory}/log/slurmd-%n.log\n"
        "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
        "SlurmdParameters=config_overrides\nReturnToService=2\n"
        "SchedulerParameters=batch_sched_delay=0\nSelectType=select/cons_tres\n"
        "SelectTypeParameters=CR_Core\nAccountingStorageType=accounting_storage/none\n"
        "JobAcctGatherType=jobacct_gather/none\n"
        f"{node_lines}\n"
        f"PartitionName=ns Nodes={','.join(nodes)} Default=YES MaxTime=INFINITE State=UP "
        "OverSubscribe=FORCE:8\n"
    )


def start_netns_cluster(
    directory: Path, mtus: dict[str, int], *, data_subnet: str | None = None,
    ctld_port: int = CTLD_PORT, slurmd_port: int = SLURMD_PORT, cluster_name: str = "slurmdiagns",
) -> NetnsCluster:
    """Nodes named by ``mtus`` (name -> MTU of its eth0); returns once sinfo shows them idle.

    ``data_subnet`` (e.g. "10.213.8"): each node also gets ``eth1`` on a second bridge, a data
    network apart from the one slurmd talks on, so that faults on it leave Slurm working.
    ``ctld_port``, ``slurmd_port``, ``cluster_name``: another cluster's own (the benchmark's).
    One such cluster at a time on a host: they share the bridges and the namespaces' names.
    """
    names = list(mtus)
    check_node_names(names)
    teardown_network(names)  # leftovers of an interrupted run
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    nodes = {}
    for i, name in enumerate(names, start=11):
        ns, host_end = _netns(name), f"sdv-{name}"[:15]
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", host_end, "master", BRIDGE)
        sh("ip", "link", "set", host_end, "up")
        sh("ip", "-n", ns, "addr", "add", f"{SUBNET}.{i}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "mtu", str(mtus[name]))
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        nodes[name] = f"{SUBNET}.{i}"
    data = {}
    if data_subnet is not None:
        sh("ip", "link", "add", DATA_BRIDGE, "type", "bridge")
        sh("ip", "addr", "add", f"{data_subnet}.1/24", "dev", DATA_BRIDGE)
        sh("ip", "link", "set", DATA_BRIDGE, "up")
        for i, name in enumerate(names, start=11):
            ns, host_end = _netns(name), f"sdd-{name}"[:15]
            sh("ip", "link", "add", host_end, "type", "veth", "peer", "name", "eth1", "netns", ns)
            sh("ip", "link", "set", host_end, "master", DATA_BRIDGE)
            sh("ip", "link", "set", host_end, "up")
            sh("ip", "-n", ns, "addr", "add", f"{data_subnet}.{i}/24", "dev", "eth1")
            sh("ip", "-n", ns, "link", "set", "eth1", "up")
            data[name] = f"{data_subnet}.{i}"
    for sub in ("state", "log", "run", *(f"spool/{n}" for n in names)):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    cluster = NetnsCluster(directory=directory, nodes=nodes, data=data)
    cluster.conf.write_text(slurm_conf(directory, nodes, ctld_port=ctld_port,
                                       slurmd_port=slurmd_port, cluster_name=cluster_name))
    env = cluster.env()
    cluster.processes.append(subprocess.Popen(
        ["slurmctld", "-D", "-i", "-f", str(cluster.conf)], env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
    for name in names:
        cluster.processes.append(subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{_netns(name)}", "slurmd", "-D", "-N", name,
             "-f", str(cluster.conf)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        out = subprocess.run(["sinfo", "-h", "-o", "%D %t"], env=env, capture_output=True,
                             text=True, timeout=30, check=False)
        if out.stdout.split() == [str(len(names)), "idle"]:
            return cluster
        time.sleep(0.5)
    logs = "\n".join(p.read_text()[-1500:] for p in (directory / "log").glob("*.log"))
    cluster.stop()
    raise RuntimeError(f"the netns cluster did not come up:\n{logs}")


#: The four nodes of the cluster tests (tests/cluster/test_probe_netns.py, test_network_stall.py)
TEST_NODES = {"nsnode1": 1500, "nsnode2": 1500, "nsnode3": 1500, "nsnode4": 1500}


@contextlib.contextmanager
def four_node_cluster(directory: Path) -> Iterator[NetnsCluster]:
    """TEST_NODES with a data network (eth1 on 10.213.8.0/24), stopped after; a test module's
    fixture. pytest.skip where namespaces cannot be made."""
    problem = available()
    if problem:
        import pytest

        pytest.skip(f"network namespaces unavailable here: {problem}")
    cluster = start_netns_cluster(directory, TEST_NODES, data_subnet="10.213.8")
    try:
        yield cluster
    finally:
        cluster.stop()


def available() -> str | None:
    """Why namespaces cannot be used here, or None."""
    for tool in ("ip", "nsenter", "slurmctld", "slurmd"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    probe = sh("ip", "netns", "add", "sd-probe", check=False)
    if probe.returncode != 0:
        return f"ip netns add failed: {probe.stderr.strip()}"
    sh("ip", "netns", "del", "sd-probe", check=False)
    return None


# ------------------------------------------------------------------ faults, each undone on exit


def in_node(node: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run a command in a node's network namespace (nsenter: /sys stays as it is)."""
    return sh("nsenter", f"--net=/run/netns/{_netns(node)}", *argv, check=check)


@contextlib.contextmanager
def blackhole(node: str, address: str) -> Iterator[None]:
    """``node`` drops everything it sends to ``address`` (a route to nowhere)."""
    in_node(node, "ip", "route", "add", "blackhole", f"{address}/32")
    try:
        yield
    finally:
        in_node(node, "ip", "route", "del", "blackhole", f"{address}/32", check=False)


@contextlib.contextmanager
def mtu(node: str, dev: str, value: int) -> Iterator[None]:
    # not /sys/class/net: under nsenter it still shows the host's interfaces
    words = in_node(node, "ip", "-o", "link", "show", "dev", dev).stdout.split()
    old = words[words.index("mtu") + 1]
    in_node(node, "ip", "link", "set", dev, "mtu", str(value))
    try:
        yield
    finally:
        in_node(node, "ip", "link", "set", dev, "mtu", old, check=False)


@contextlib.contextmanager
def link_down(node: str, dev: str) -> Iterator[None]:
    in_node(node, "ip", "link", "set", dev, "down")
    try:
        yield
    finally:
        in_node(node, "ip", "link", "set", dev, "up", check=False)


@contextlib.contextmanager
def slow_link(node: str, dev: str, address: str, rate: str = "1mbit") -> Iterator[None]:
    """What ``node`` sends to ``address`` through ``dev`` goes at ``rate`` (htb and a u32 filter:
    sch_netem is not in this sandbox's kernel); everything else at full speed."""
    in_node(node, "tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10")
    try:
        in_node(node, "tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb",
                "rate", "10gbit")
        in_node(node, "tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:30", "htb",
                "rate", rate, "ceil", rate)
        # a short queue, as a rate-limited port has: not seconds of buffered packets
        in_node(node, "tc", "qdisc", "add", "dev", dev, "parent", "1:30", "handle", "30:", "pfifo",
                "limit", "20")
        in_node(node, "tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio",
                "1", "u32", "match", "ip", "dst", f"{address}/32", "classid", "1:30")
        yield
    finally:
        in_node(node, "tc", "qdisc", "del", "dev", dev, "root", check=False)


def node_pids(node: str) -> list[int]:
    out = sh("ip", "netns", "pids", _netns(node), check=False).stdout.split()
    return [int(p) for p in out if p.isdigit()]


@contextlib.contextmanager
def route_mtu(node: str, address: str, dev: str, value: int) -> Iterator[None]:
    """A route from ``node`` to ``address`` whose MTU is below the interface's (a tunnel, a
    smaller hop): full-size packets that may not be fragmented cannot go."""
    in_node(node, "ip", "route", "add", f"{address}/32", "dev", dev, "mtu", "lock", str(value))
    try:
        yield
    finally:
        in_node(node, "ip", "route", "del", f"{address}/32", "dev", dev, check=False)

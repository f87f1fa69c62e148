"""The attach benchmark's per-namespace variant (--netns), the parts that need no cluster: its
ports, node names, slurm.conf and the environment its jobs are submitted with."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path

import pytest
from support.netns_cluster import MAX_NODES, check_node_names, slurm_conf

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_attach.py"
#: The shared-namespace bench cluster's and the probe tests' namespace cluster's ports.
TAKEN = {6917, 18001, 6987, 18701}


def _bench():
    spec = importlib.util.spec_from_file_location("bench_attach", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ports_are_two_distinct_unprivileged_ports_apart_from_the_other_clusters():
    bench = _bench()
    # GIVEN the default --netns-ports WHEN parsed THEN neither is a port another cluster uses
    ctld, slurmd = bench.parse_ports(bench.NETNS_PORTS)
    assert ctld != slurmd and not {ctld, slurmd} & TAKEN
    assert bench.parse_ports("6837,17611") == (6837, 17611)
    # AND a malformed or clashing pair is a usage error, not a traceback
    for bad in ("6837", "6837,x", "6837,6837", "80,17611", "6837,70000", "1,2,3"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench.parse_ports(bad)


def test_node_names_fit_the_subnet_and_give_distinct_interface_names():
    bench = _bench()
    # GIVEN the benchmark's node names at its largest size (128 nodes) and the subnet's limit
    # THEN each node gets its own veth name (15 characters at most) and address
    check_node_names(bench.netns_node_names(128))
    check_node_names(bench.netns_node_names(MAX_NODES))
    assert len(set(bench.netns_node_names(128))) == 128
    # AND more nodes than addresses, or names whose veth names collide once cut, are refused
    with pytest.raises(ValueError, match="at most"):
        check_node_names(bench.netns_node_names(MAX_NODES + 1))
    with pytest.raises(ValueError, match="collide"):
        check_node_names(["benchnode-0001", "benchnode-0002"])


def test_slurm_conf_puts_each_node_on_its_own_address_and_the_ports_given(tmp_path):
    bench = _bench()
    # GIVEN three nodes with their addresses and the benchmark's own ports
    names = bench.netns_node_names(3)
    nodes = {n: f"10.213.7.{11 + i}" for i, n in enumerate(names)}
    # WHEN the cluster's slurm.conf is written
    conf = slurm_conf(tmp_path, nodes, ctld_port=6837, slurmd_port=17611,
                      cluster_name="slurmdiag-bench-ns")
    # THEN slurmctld listens on the ports given, every slurmd on its own address, one port
    assert "SlurmctldPort=6837\n" in conf and "ClusterName=slurmdiag-bench-ns\n" in conf
    lines = re.findall(r"^NodeName=(\S+) .*NodeAddr=(\S+) Port=(\d+) ", conf, re.MULTILINE)
    assert lines == [(n, a, "17611") for n, a in nodes.items()]
    assert f"PartitionName=ns Nodes={','.join(names)} " in conf
    assert f"StateSaveLocation={tmp_path}/state\n" in conf
    # AND without ports given, the probe tests' own (unchanged for them)
    assert "SlurmctldPort=6987\n" in slurm_conf(tmp_path, nodes)


def test_jobs_on_the_namespace_cluster_use_its_conf_and_each_nodes_own_interface():
    bench = _bench()
    # GIVEN the namespace cluster's environment
    cluster_env = {"SLURM_CONF": "/tmp/ns/slurm.conf", "PATH": "/usr/bin"}
    # WHEN a job's submission environment is made from it
    env = bench.netns_job_env(cluster_env)
    # THEN it points at that cluster and gloo binds each node's eth0 (the bridge), not the
    # address of the host name, which no node namespace has
    assert env["SLURM_CONF"] == "/tmp/ns/slurm.conf" and env["PATH"] == "/usr/bin"
    assert env["GLOO_SOCKET_IFNAME"] == "eth0"
    assert "GLOO_SOCKET_IFNAME" not in cluster_env

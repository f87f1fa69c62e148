"""Which slurmd of the local cluster died: `cluster status` as it printed it with node004's
slurmd killed (tests/fixtures/LOCAL_SOURCES.md), and the restart that asks nothing of a cluster
that is whole."""

from __future__ import annotations

from pathlib import Path

from support.cluster_health import dead_slurmds, restart_dead_slurmds

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cluster"


def test_the_dead_slurmd_is_named_and_the_running_ones_not():
    status = (FIXTURES / "status_one_slurmd_dead.txt").read_text()
    assert dead_slurmds(status) == ["node004"]
    whole = status.replace("slurmd node004: NOT running", "slurmd node004: running (pid 1, port 17004)")
    assert dead_slurmds(whole) == []


def test_a_status_that_lists_no_node_names_none(tmp_path):
    assert dead_slurmds("no cluster configured in /tmp/slurmdiag-cluster\n") == []


def test_no_restart_without_the_script_or_a_slurm_conf(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    assert restart_dead_slurmds(tmp_path / "missing-cluster-script", 4) == []
    script = tmp_path / "cluster"
    script.write_text("#!/bin/sh\necho 'slurmd node002: NOT running'\n")
    script.chmod(0o755)
    monkeypatch.delenv("SLURM_CONF")
    assert restart_dead_slurmds(script, 4) == []
    # AND with one: the script's status is read and `up` is run for the dead one
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    script.write_text("#!/bin/sh\nif [ \"$1\" = up ]; then echo \"$@\" > \"$0.up\"; else "
                      "echo 'slurmd node002: NOT running'; fi\n")
    assert restart_dead_slurmds(script, 4) == ["node002"]
    assert (tmp_path / "cluster.up").read_text().strip() == "up --nodes 4"

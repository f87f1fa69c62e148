"""The InfiniBand port states the collector ships raw (sysfs' ``4: ACTIVE``), read on the controller."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmdiag.analysis.nic import ib_port_active
from slurmdiag.assemble import node_from_document
from slurmdiag.parsers.infiniband import IbState, parse_sysfs_ib_phys_state, parse_sysfs_ib_state
from slurmdiag.snapshot import IbPort, Snapshot

SYSFS_IB = Path(__file__).resolve().parent.parent / "fixtures" / "net_ib" / "sys_class_infiniband_h100"


def test_real_sysfs_port_files_read_as_number_and_name() -> None:
    # GIVEN the files of a real H100 node's /sys/class/infiniband port (no trailing newline)
    port = SYSFS_IB / "mlx5_0" / "ports" / "1"
    # WHEN read THEN the kernel's number and name, with or without the newline sysfs adds
    assert parse_sysfs_ib_state((port / "state").read_text()) == IbState(4, "ACTIVE")
    assert parse_sysfs_ib_phys_state((port / "phys_state").read_text() + "\n") == IbState(5, "LinkUp")


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("1: DOWN", IbState(1, "DOWN")),
        ("5: ACTIVE_DEFER", IbState(5, "ACTIVE_DEFER")),
        ("ACTIVE", IbState(4, "ACTIVE")),  # a name alone (an older snapshot's): its number
        ("active", IbState(4, "active")),
        ("9: NEWSTATE", IbState(9, "NEWSTATE")),  # a state a newer kernel names: kept
        ("4:", IbState(4, "ACTIVE")),
        ("garbage", IbState(None, "garbage")),
        ("", IbState(None, None)),
        (None, IbState(None, None)),
    ],
)
def test_state_text_forms(text: str | None, state: IbState) -> None:
    assert parse_sysfs_ib_state(text) == state


def test_phys_state_names_are_the_kernels() -> None:
    assert parse_sysfs_ib_phys_state("3: Disabled") == IbState(3, "Disabled")
    assert parse_sysfs_ib_phys_state("Polling") == IbState(2, "Polling")


def test_assembled_port_carries_name_and_number_and_survives_the_snapshot_round_trip() -> None:
    # GIVEN a node document with the port as the collector ships it
    doc = {"format": 1, "nics": {"ib_ports": [
        {"device": "mlx5_0", "port": 1, "state": "4: ACTIVE", "phys_state": "5: LinkUp",
         "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"},
        {"device": "mlx5_1", "port": 1, "state": "1: DOWN", "phys_state": "3: Disabled",
         "rate": None, "link_layer": "InfiniBand"}]}}
    # WHEN assembled
    up, down = node_from_document("n1", doc).nics.ib_ports
    # THEN the snapshot holds the kernel's names and numbers, and the analysis reads the numbers
    assert (up.state, up.state_code, up.phys_state, up.phys_state_code) == ("ACTIVE", 4, "LinkUp", 5)
    assert (down.state, down.state_code) == ("DOWN", 1)
    assert ib_port_active(up) and not ib_port_active(down)


def test_an_older_snapshots_port_text_is_read_with_the_same_parser() -> None:
    # GIVEN ports as snapshots written before the numbers were kept (raw sysfs text, no codes)
    old = [IbPort("mlx5_0", 1, "4: ACTIVE", "5: LinkUp"), IbPort("mlx5_1", 1, "1: DOWN", "3: Disabled"),
           IbPort("mlx5_2", 1, "5: ACTIVE_DEFER")]
    # THEN ACTIVE (and ACTIVE_DEFER) are active, DOWN is not, whatever the words around the number
    assert [ib_port_active(p) for p in old] == [True, False, True]
    # AND a port whose code contradicts a stale name follows the code
    assert not ib_port_active(IbPort("mlx5_3", 1, "ACTIVE", state_code=1))


def test_snapshot_json_keeps_the_codes() -> None:
    port = IbPort("mlx5_0", 1, "ACTIVE", "LinkUp", state_code=4, phys_state_code=5)
    from slurmdiag.snapshot import from_jsonable, to_jsonable

    assert from_jsonable(IbPort, to_jsonable(port)) == port
    assert Snapshot  # the snapshot's loader is the generic one above

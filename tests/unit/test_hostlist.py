"""Tests of slurmdiag.hostlist on real Slurm host lists and ranges (tests/fixtures/slurm/).

``scontrol show hostnames`` sessions pasted from real clusters are the expected outputs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurmdiag.hostlist import (
    compress_hostlist,
    expand_hostlist,
    format_int_ranges,
    parse_int_ranges,
)
from slurmdiag.slurm.parse import parse_scontrol_job

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def one_job(name: str):  # type: ignore[no-untyped-def]
    (job,) = parse_scontrol_job(read(name))
    return job


def _hostnames_sessions(name: str) -> list[tuple[str, list[str]]]:
    """Split a pasted terminal session into (hostlist argument, printed lines)."""
    sessions: list[tuple[str, list[str]]] = []
    for line in read(name).splitlines():
        if line.startswith("$ scontrol show hostnames "):
            sessions.append((line.removeprefix("$ scontrol show hostnames "), []))
        elif line.strip() and not line.startswith("$") and sessions:
            sessions[-1][1].append(line)
    return sessions


def test_expand_hostlist_keeps_duplicates_and_order_like_scontrol() -> None:
    # GIVEN a real `scontrol show hostnames xx[1-4,3]` session
    [(expr, printed)] = _hostnames_sessions("scontrol_show_hostnames_duplicates_kept.txt")
    # WHEN we expand the same expression
    hosts = expand_hostlist(expr)
    # THEN we print exactly what Slurm printed, xx3 twice
    assert expr == "xx[1-4,3]"
    assert hosts == printed == ["xx1", "xx2", "xx3", "xx4", "xx3"]


def test_expand_hostlist_multidimensional_and_invalid_like_scontrol() -> None:
    # GIVEN a real session: r[1-2]n[1-2] expands, r[1-2]n[1-2]-bmc is rejected by Slurm
    (good_expr, good_out), (bad_expr, bad_out) = _hostnames_sessions(
        "scontrol_show_hostnames_multidim_and_invalid.txt"
    )
    # WHEN / THEN the cartesian product comes out in Slurm's order
    assert expand_hostlist(good_expr) == good_out == ["r1n1", "r1n2", "r2n1", "r2n2"]
    # AND the expression Slurm called invalid raises ValueError with the same wording
    assert bad_out == [f"Invalid hostlist: {bad_expr}"]
    with pytest.raises(ValueError, match="Invalid hostlist"):
        expand_hostlist(bad_expr)


@pytest.mark.parametrize(
    ("partition", "first", "last"),
    [("partition1", "node0201", "node7735"), ("partition2", "node1", "node1470")],
)
def test_expand_hostlist_on_real_partition_node_lists(
    partition: str, first: str, last: str
) -> None:
    # GIVEN `scontrol show partition -o` lines whose Nodes= use zero padding and several
    # comma-joined bracket groups, with Slurm's own TotalNodes= count
    line = next(
        ln
        for ln in read("scontrol_show_partition_oneliner_meta.txt").splitlines()
        if ln.startswith(f"PartitionName={partition} ")
    )
    nodes_expr = re.search(r" Nodes=(\S+)", line).group(1)  # type: ignore[union-attr]
    total = int(re.search(r" TotalNodes=(\d+)", line).group(1))  # type: ignore[union-attr]
    # WHEN expanded
    hosts = expand_hostlist(nodes_expr)
    # THEN the count matches Slurm's, widths are kept, and compressing gives a list that
    # expands back to the same hosts
    assert len(hosts) == len(set(hosts)) == total
    assert (hosts[0], hosts[-1]) == (first, last)
    assert expand_hostlist(compress_hostlist(hosts)) == hosts


def test_compress_hostlist_of_partition1_is_slurms_own_string() -> None:
    # GIVEN the padded node list of partition1, already in Slurm's compressed form
    line = read("scontrol_show_partition_oneliner_meta.txt").splitlines()[0]
    nodes_expr = re.search(r" Nodes=(\S+)", line).group(1)  # type: ignore[union-attr]
    # WHEN expanded then compressed again
    # THEN we get Slurm's string back, character for character
    assert compress_hostlist(expand_hostlist(nodes_expr)) == nodes_expr
    assert (
        nodes_expr == "node[0201-0272,0281-0932,1069-2468,4000-4455,5025-5028,5041-5316,7456-7735]"
    )


@pytest.mark.parametrize(
    ("expr", "hosts"),
    [
        ("node[1-3,7]", ["node1", "node2", "node3", "node7"]),
        ("node[001-003]", ["node001", "node002", "node003"]),
        ("node[08-11]", ["node08", "node09", "node10", "node11"]),
        ("a[1-2],b[3-4],c", ["a1", "a2", "b3", "b4", "c"]),
        ("inti[6012,6015,6018-6019]", ["inti6012", "inti6015", "inti6018", "inti6019"]),
        ("node-[63-65]", ["node-63", "node-64", "node-65"]),
        ("doppelganger,dune3", ["doppelganger", "dune3"]),
        ("r13i5n0", ["r13i5n0"]),
        ("(null)", []),
        ("", []),
        ("  ", []),
    ],
)
def test_expand_hostlist_forms(expr: str, hosts: list[str]) -> None:
    # GIVEN a host list form Slurm prints  WHEN expanded  THEN the names are as Slurm lists them
    assert expand_hostlist(expr) == hosts


@pytest.mark.parametrize(
    "expr",
    ["node[1-3", "node1-3]", "node[3-1]", "node[a-b]", "node[]", "node[[1-2]]", "node[1-2]x",
     "node[1-]", "node[-1]", "node[1-99999999]"],
)  # fmt: skip
def test_expand_hostlist_rejects_invalid(expr: str) -> None:
    # GIVEN an expression Slurm would refuse  WHEN expanded  THEN ValueError names the input
    with pytest.raises(ValueError, match=re.escape(expr[:4])):
        expand_hostlist(expr)


@pytest.mark.parametrize(
    ("names", "expr"),
    [
        (["node001", "node002", "node003", "node004", "node007"], "node[001-004,007]"),
        (["node9", "node10", "node11"], "node[9-11]"),
        (["node098", "node099", "node100"], "node[098-100]"),
        (["gpu1", "gpu2", "login", "cn05"], "gpu[1-2],login,cn05"),
        (["r1n1", "r1n2", "r2n1"], "r1n[1-2],r2n1"),
        (["node3", "node1", "node2", "node1"], "node[1-3]"),
        ([], ""),
    ],
)
def test_compress_hostlist(names: list[str], expr: str) -> None:
    # GIVEN host names  WHEN compressed  THEN grouped by prefix and width, sorted within a group
    assert compress_hostlist(names) == expr


def test_int_ranges_round_trip_on_real_gres_indices() -> None:
    # GIVEN the GPU indices of a real 18.08 job: GRES_IDX=gpu(IDX:0,2-3,5)
    gres = one_job("irush_gpu_gres_idx_old_format.txt").details[0].gres
    assert gres == "gpu(IDX:0,2-3,5)"
    idx = re.search(r"IDX:([\d,-]+)", gres).group(1)  # type: ignore[union-attr]
    # WHEN parsed and formatted back
    # THEN the indices are those GPUs and the text is unchanged
    assert parse_int_ranges(idx) == [0, 2, 3, 5]
    assert format_int_ranges(parse_int_ranges(idx)) == idx
    assert format_int_ranges([15, 0, 1, 2, 3, 4, 5, 6, 8, 10, 11, 12, 13, 14]) == "0-6,8,10-15"
    assert format_int_ranges([]) == "" and parse_int_ranges("") == []


@pytest.mark.parametrize("text", ["1-", "3-1", "a", "1,,2", "-1"])
def test_parse_int_ranges_rejects_invalid(text: str) -> None:
    # GIVEN malformed ranges  WHEN parsed  THEN ValueError
    with pytest.raises(ValueError):
        parse_int_ranges(text)


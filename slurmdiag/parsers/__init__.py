"""Pure parsers: the text a tool printed in, snapshot dataclasses out. No I/O here.

Each ``parse_<tool>_<what>`` reads what it can of odd or truncated output and raises
``slurmdiag.errors.ParseError`` only for text that is not that tool's output at all.

    pyspy.py       py-spy dump --json
    strace.py      strace -c [-f] summary table
    nvidia_smi.py  --query-gpu / --query-compute-apps CSV, -q -x XML, dmesg Xid lines
    infiniband.py  /sys/class/infiniband port state and phys_state (``4: ACTIVE``)
    nccl_log.py    NCCL INFO/WARN and PyTorch watchdog lines of a job log
"""

from __future__ import annotations

from slurmdiag.parsers.infiniband import parse_sysfs_ib_phys_state, parse_sysfs_ib_state
from slurmdiag.parsers.nccl_log import parse_nccl_log
from slurmdiag.parsers.nvidia_smi import (
    XidEvent,
    parse_nvidia_smi_apps_csv,
    parse_nvidia_smi_query_csv,
    parse_nvidia_smi_xml,
    parse_xid_events,
    parse_xid_lines,
)
from slurmdiag.parsers.pyspy import parse_pyspy_json
from slurmdiag.parsers.strace import parse_strace_summary

__all__ = [
    "XidEvent",
    "parse_nccl_log",
    "parse_nvidia_smi_apps_csv",
    "parse_nvidia_smi_query_csv",
    "parse_nvidia_smi_xml",
    "parse_pyspy_json",
    "parse_strace_summary",
    "parse_sysfs_ib_phys_state",
    "parse_sysfs_ib_state",
    "parse_xid_events",
    "parse_xid_lines",
]

"""Pure parsers: the text a tool printed in, snapshot dataclasses out. No I/O here.

Each ``parse_<tool>_<what>`` reads what it can of odd or truncated output and raises
``slurmdiag.errors.ParseError`` only for text that is not that tool's output at all.

    pyspy.py       py-spy dump --json, py-spy dump (text)
    strace.py      strace -c [-f] summary table
    nvidia_smi.py  --query-gpu / --query-compute-apps CSV, -q -x XML, -q text, dmesg Xid lines
    net.py         ip -j addr/link, ibstat, ibstatus, ibv_devinfo, /sys/class/infiniband,
                   /proc/net/tcp[6]
    nccl_log.py    NCCL INFO/WARN and PyTorch watchdog lines of a job log
"""

from __future__ import annotations

from slurmdiag.parsers.nccl_log import parse_nccl_log
from slurmdiag.parsers.net import (
    TcpSocket,
    parse_ibstat,
    parse_ibstatus,
    parse_ibv_devinfo,
    parse_ip_addr_json,
    parse_ip_link_json,
    parse_proc_net_tcp,
    parse_sys_class_infiniband,
)
from slurmdiag.parsers.nvidia_smi import (
    XidEvent,
    parse_nvidia_smi_apps_csv,
    parse_nvidia_smi_q_text,
    parse_nvidia_smi_query_csv,
    parse_nvidia_smi_xml,
    parse_xid_events,
    parse_xid_lines,
)
from slurmdiag.parsers.pyspy import ProcessDump, parse_pyspy_json, parse_pyspy_text
from slurmdiag.parsers.strace import parse_strace_summary

__all__ = [
    "ProcessDump",
    "TcpSocket",
    "XidEvent",
    "parse_ibstat",
    "parse_ibstatus",
    "parse_ibv_devinfo",
    "parse_ip_addr_json",
    "parse_ip_link_json",
    "parse_nccl_log",
    "parse_nvidia_smi_apps_csv",
    "parse_nvidia_smi_q_text",
    "parse_nvidia_smi_query_csv",
    "parse_nvidia_smi_xml",
    "parse_proc_net_tcp",
    "parse_pyspy_json",
    "parse_pyspy_text",
    "parse_strace_summary",
    "parse_sys_class_infiniband",
    "parse_xid_events",
    "parse_xid_lines",
]

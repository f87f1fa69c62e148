"""Find the NCCL / PyTorch watchdog lines of interest in a job's own log.

One pass over the lines, each first checked with plain substring tests, so a tail of a
multi-GB log costs about as much as reading it. Launcher prefixes (``[1]<stdout>:``,
srun's `` 0: ``, ``[80746] ``, ``[rank0]:``, timestamps, indentation, progress-bar junk)
are tolerated because every pattern is searched for, not anchored at the line start.

Finding kinds and their ``fields``:

- ``nccl_version``: version, cuda
- ``nccl_bootstrap``: interface, interfaces, address (or env, value for NCCL_SOCKET_IFNAME)
- ``nccl_net``: network (IB, Socket, Libfabric, IBext_v8, ...), devices, interface,
  transports, oob_interface, oob_address, relaxed_ordering, plugin, plugin_api, plugin_version,
  provider, fabric, nics, status, env, value
- ``nccl_warn``: message, where (the C++ function:line NCCL printed, when it did)
- ``watchdog_timeout``: event (timeout | exception), seq, op, timeout_ms, ran_for_ms,
  numel_in, numel_out, last_enqueued, last_completed, pg, pg_name
- ``xid``: xid, pci, pid, name, message

Every finding from an NCCL line also carries pid and cuda_dev from ``host:pid:tid [dev]``;
``task`` is srun's ``--label`` task id and ``local_rank`` torchrun's ``[N]<stdout>:`` prefix.
"""

from __future__ import annotations

import re

from slurmdiag.parsers.log_prefix import RANK_PREFIX_RE, split_prefixes
from slurmdiag.parsers.nvidia_smi import XID_RE
from slurmdiag.safeio import decimal_int
from slurmdiag.snapshot import LogFinding

__all__ = ["parse_nccl_log"]

MAX_TEXT = 500
_ORIGIN_WINDOW = 400

_ORIGIN_RE = re.compile(r"(?P<host>[A-Za-z0-9][\w.-]*):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] ")
_PG_RANK_RE = re.compile(
    r"\[(?:PG (?:ID )?(?P<pg>\d+)(?: PG GUID [^(\s\]]+)?(?: ?\((?P<pg_name>[^)]*)\))? )?"
    r"Rank (?P<rank>\d+)\]"
)

_VERSION_RE = re.compile(r"NCCL version (?P<version>\d+\.\d+\.\d+)(?:\+cuda(?P<cuda>[\d.]+))?")
_BOOTSTRAP_RE = re.compile(r"Bootstrap ?: Using (?P<rest>.*)$")
_NET_USING_RE = re.compile(r"NET/(?P<net>IB|Socket) ?: Using (?P<rest>.*)$")
_NET_NO_DEVICE_RE = re.compile(r"NET/(?P<net>IB|Socket) ?: No (?:device|interface) found")
_USING_NETWORK_RE = re.compile(r"Using network (?P<net>\S+)")
_PLUGIN_LOADED_RE = re.compile(
    r"NET/Plugin ?: (?:Loaded net plugin|Loaded plugin) (?P<plugin>[^\s(]+)(?: \((?P<api>v\d+)\))?"
)
_PLUGIN_NONE_RE = re.compile(r"NET/Plugin ?: No plugin found")
_OFI_INIT_RE = re.compile(r"NET/OFI Initializing (?P<plugin>\S+) (?P<version>\S+)")
_OFI_PROVIDER_RE = re.compile(
    r"NET/OFI Selected provider is (?P<provider>[^,\s]+), fabric is (?P<fabric>[^\s(]+)"
    r"(?: \(found (?P<nics>\d+) nics\))?"
)
_ENV_RE = re.compile(r"(?P<env>NCCL_[A-Z0-9_]+) set by environment to (?P<value>.*?)\.?\s*$")
_NET_ENV_PREFIXES = ("NCCL_IB_", "NCCL_NET", "NCCL_SOCKET_", "NCCL_CROSS_NIC", "NCCL_COLLNET")

_WATCHDOG_TIMEOUT_RE = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\(")
_WORK_FIELDS = (
    ("seq", re.compile(r"SeqNum=(\d+)")),
    ("op", re.compile(r"OpType=(\w+)")),
    ("numel_in", re.compile(r"NumelIn=(\d+)")),
    ("numel_out", re.compile(r"NumelOut=(\d+)")),
    ("timeout_ms", re.compile(r"Timeout\(ms\)=(\d+)")),
    ("ran_for_ms", re.compile(r"ran for (\d+) milli")),
)
_WATCHDOG_DETECTED_RE = re.compile(
    r"detected by watchdog at work(?: sequence id)?: (?P<seq>\d+),? PG status: "
    r"last enqueued work: (?P<enq>\d+), last completed work: (?P<done>\d+)"
    r"|detected by watchdog at work: (?P<seq2>\d+), last enqueued NCCL work: (?P<enq2>\d+), "
    r"last completed NCCL work: (?P<done2>\d+)"
)


def _interfaces(rest: str) -> list[tuple[str, str]]:
    """``[0]ib0:10.1.2.3<0> [1]ib1:...`` or ``eth0:10.1.2.3<0>`` -> [(name, address), ...]."""
    found = []
    for token in rest.split():
        token = re.sub(r"^\[\d+\]", "", token)
        name, sep, address = token.partition(":")
        if not sep or not name:
            continue
        found.append((name, address.split("<", 1)[0]))
    return found


def _net_using(net: str, rest: str) -> dict[str, str]:
    fields = {"network": net}
    devices_part, _, oob = rest.partition(";")
    if "[RO]" in devices_part:
        fields["relaxed_ordering"] = "1"
        devices_part = devices_part.replace("[RO]", " ")
    if net == "Socket":
        interfaces = _interfaces(devices_part)
        fields["devices"] = ",".join(name for name, _ in interfaces)
        if interfaces:
            fields["interface"], fields["address"] = interfaces[0]
    else:
        # "[0]mlx5_0:1/IB [1]mlx5_3:1/RoCE" -> "mlx5_0:1,mlx5_3:1"; transports kept apart.
        devices, transports = [], []
        for token in devices_part.split():
            token = re.sub(r"^\[\d+\]", "", token)
            device, _, transport = token.partition("/")
            if device:
                devices.append(device)
                transports.append(transport)
        fields["devices"] = ",".join(devices)
        if any(transports):
            fields["transports"] = ",".join(transports)
    oob_match = re.search(r"OOB (\S+)", oob)
    if oob_match:
        oob_interfaces = _interfaces(oob_match.group(1))
        if oob_interfaces:
            fields["oob_interface"], fields["oob_address"] = oob_interfaces[0]
        else:
            fields["oob_interface"] = oob_match.group(1)
    return fields


def _classify(line: str) -> tuple[str, dict[str, str], int] | None:
    """(kind, fields, position of the match) for a line of interest, else None."""
    warn = line.find("NCCL WARN ")
    if warn >= 0:
        return "nccl_warn", {"message": line[warn + 10 :].strip()}, warn
    if "atchdog" in line:
        timeout = _WATCHDOG_TIMEOUT_RE.search(line)
        if timeout:
            fields = {"event": "timeout"}
            for name, pattern in _WORK_FIELDS:
                found = pattern.search(line, timeout.start())
                if found:
                    fields[name] = found.group(1)
            return "watchdog_timeout", fields, timeout.start()
        detected = _WATCHDOG_DETECTED_RE.search(line)
        if detected:
            groups = detected.groupdict()
            return (
                "watchdog_timeout",
                {
                    "event": "exception",
                    "seq": groups["seq"] or groups["seq2"] or "",
                    "last_enqueued": groups["enq"] or groups["enq2"] or "",
                    "last_completed": groups["done"] or groups["done2"] or "",
                },
                detected.start(),
            )
    if "NCCL version" in line:
        match = _VERSION_RE.search(line)
        if match:
            fields = {"version": match.group("version")}
            if match.group("cuda"):
                fields["cuda"] = match.group("cuda")
            return "nccl_version", fields, match.start()
    if "Bootstrap" in line:
        match = _BOOTSTRAP_RE.search(line)
        if match:
            interfaces = _interfaces(match.group("rest"))
            fields = {"interfaces": ",".join(name for name, _ in interfaces)}
            if interfaces:
                fields["interface"], fields["address"] = interfaces[0]
            return "nccl_bootstrap", fields, match.start()
    if "NET/" in line:
        for pattern in (_NET_USING_RE, _NET_NO_DEVICE_RE):
            match = pattern.search(line)
            if match is None:
                continue
            if pattern is _NET_USING_RE:
                fields = _net_using(match.group("net"), match.group("rest"))
            else:
                fields = {"network": match.group("net"), "devices": "", "status": "no_device"}
            return "nccl_net", fields, match.start()
        match = _PLUGIN_LOADED_RE.search(line)
        if match:
            fields = {"plugin": match.group("plugin")}
            if match.group("api"):
                fields["plugin_api"] = match.group("api")
            return "nccl_net", fields, match.start()
        match = _PLUGIN_NONE_RE.search(line)
        if match:
            return "nccl_net", {"plugin": "internal"}, match.start()
        match = _OFI_INIT_RE.search(line)
        if match:
            fields = {"plugin": match.group("plugin"), "plugin_version": match.group("version")}
            return "nccl_net", fields, match.start()
        match = _OFI_PROVIDER_RE.search(line)
        if match:
            fields = {"provider": match.group("provider"), "fabric": match.group("fabric")}
            if match.group("nics"):
                fields["nics"] = match.group("nics")
            return "nccl_net", fields, match.start()
    if "Using network" in line:
        match = _USING_NETWORK_RE.search(line)
        if match:
            return "nccl_net", {"network": match.group("net")}, match.start()
    if "set by environment" in line:
        match = _ENV_RE.search(line)
        if match:
            env, value = match.group("env"), match.group("value").strip()
            if env == "NCCL_SOCKET_IFNAME":
                return "nccl_bootstrap", {"env": env, "value": value}, match.start()
            if env.startswith(_NET_ENV_PREFIXES):
                return "nccl_net", {"env": env, "value": value}, match.start()
    if "Xid" in line:
        match = XID_RE.search(line)
        if match:
            pid = (match.group("pid") or "").strip("'\" ")
            fields = {"xid": match.group("xid"), "pci": match.group("pci")}
            if decimal_int(pid) is not None:
                fields["pid"] = pid
            if match.group("name"):
                fields["name"] = match.group("name").strip()
            fields["message"] = match.group("message").strip()
            return "xid", fields, match.start()
    return None


def _finding_text(line: str, anchor: int) -> str:
    """The line as a person would quote it: after progress-bar carriage returns, ≤500 chars."""
    carriage = line.rfind("\r", 0, anchor)
    if carriage >= 0:
        line = line[carriage + 1 :]
        anchor -= carriage + 1
    text = line.strip()
    if len(text) > MAX_TEXT:
        text = line[max(0, anchor - 100) :].strip()[:MAX_TEXT]
    return text


def parse_nccl_log(text: str, source: str) -> tuple[LogFinding, ...]:
    """Findings (NCCL network choice, bootstrap interface, WARN, watchdog, Xid) of one log.

    ``line_no`` is 1-based and counts ``\\n`` only, so it matches ``sed -n Np`` even when
    progress bars wrote carriage returns. ``rank`` is set only from an explicit rank marker
    (``[rank3]:``, ``[Rank 3]``, ``[PG ... Rank 3]``), never guessed from a device number.
    """
    findings = []
    for line_no, line in enumerate(text.split("\n"), start=1):
        if "NCCL" not in line and "ProcessGroup" not in line and "Xid" not in line:
            continue
        classified = _classify(line)
        if classified is None:
            continue
        kind, fields, anchor = classified
        # host:pid:tid [dev] sits just before the message; a bounded window keeps this linear.
        origin = _ORIGIN_RE.search(line, max(0, anchor - _ORIGIN_WINDOW), anchor)
        host = None
        if origin is not None:
            host = origin.group("host")
            fields["pid"] = origin.group("pid")
            fields["cuda_dev"] = origin.group("dev")
            if kind == "nccl_warn" and line[origin.end() : anchor].strip():
                # NCCL 2.2x prints the C++ function and line before WARN
                fields["where"] = line[origin.end() : anchor].strip()
        prefix = line[:anchor]
        rank_prefix = RANK_PREFIX_RE.search(prefix)
        pg_rank = _PG_RANK_RE.search(prefix)
        rank = None
        if rank_prefix:
            rank = decimal_int(rank_prefix.group("rank"))
        elif pg_rank:
            rank = int(pg_rank.group("rank"))
        if pg_rank and pg_rank.group("pg") is not None:
            fields["pg"] = pg_rank.group("pg")
        if pg_rank and pg_rank.group("pg_name"):
            fields["pg_name"] = pg_rank.group("pg_name")
        launcher = split_prefixes(line)  # srun's label, torchrun's local rank
        if launcher.task is not None:
            fields["task"] = str(launcher.task)
        if launcher.local_rank is not None:
            fields["local_rank"] = str(launcher.local_rank)
        findings.append(
            LogFinding(
                source=source,
                line_no=line_no,
                kind=kind,
                text=_finding_text(line, anchor),
                rank=rank,
                host=host,
                fields={key: value[:MAX_TEXT] for key, value in fields.items()},
            )
        )
    return tuple(findings)

"""Pure parsers for Slurm output: job ids, scontrol/squeue text and JSON.

Host lists and integer ranges, both ways, are ``slurmdiag.hostlist``.

Nothing here runs a command or touches a file: text goes in, frozen dataclasses come out, so every
function is tested directly on real captured outputs (tests/fixtures/slurm/).

Conventions shared by every job parser:
- Slurm's "no value" spellings (``(null)``, ``Unknown``, ``N/A``, ``None``, empty) become ``None``.
- ``SlurmJob.job_id`` is the unique id of the record (for an array task it is the task's own id,
  ``array_job_id``/``array_task_id`` name the array); all ids stay strings.
- Times are kept as Slurm prints them in text output (local time, no offset). JSON gives epoch
  seconds, which are rendered as ISO-8601 UTC *with* ``+00:00`` so the two cannot be confused.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, NamedTuple

from slurmdiag.errors import ParseError
from slurmdiag.hostlist import SlurmTextError, expand_hostlist, format_int_ranges
from slurmdiag.safeio import decimal_int

__all__ = [
    "SQUEUE_TEXT_DELIMITER",
    "SQUEUE_TEXT_FIELDS",
    "SQUEUE_TEXT_FORMAT",
    "ForgedJobRecord",
    "JobNodeDetail",
    "JobRef",
    "SlurmJob",
    "parse_job_id",
    "parse_scontrol_job",
    "parse_scontrol_job_json",
    "parse_scontrol_node_addrs",
    "parse_squeue_json",
    "parse_squeue_text",
]

# --------------------------------------------------------------------------------------------
# Job ids
# --------------------------------------------------------------------------------------------

_JOB_ID_RE = re.compile(r"^([0-9]{1,18})(?:_([0-9]{1,18})|\+([0-9]{1,18}))?$")


@dataclass(frozen=True)
class JobRef:
    """A job as the user names it: ``123``, array task ``123_4`` or het component ``123+1``."""

    base: str
    array_task: int | None = None
    het_offset: int | None = None

    def __str__(self) -> str:
        if self.array_task is not None:
            return f"{self.base}_{self.array_task}"
        if self.het_offset is not None:
            return f"{self.base}+{self.het_offset}"
        return self.base


def array_task_name(array_job_id: str | None, array_task_id: str | None) -> str | None:
    """``A_T``, an array task's name as squeue prints it; None for a job that is no array task."""
    if array_job_id and array_task_id:
        return f"{array_job_id}_{array_task_id}"
    return None


def parse_job_id(text: str) -> JobRef:
    """Parse ``123``, ``123_4`` or ``123+1``; anything else (steps, ranges, names) -> ValueError."""
    match = _JOB_ID_RE.match(text.strip())
    if not match:
        raise SlurmTextError(
            f"invalid job id {text!r}: expected 123, 123_4 (array task) or 123+1 (het component)"
        )
    base = str(int(match.group(1)))
    task = int(match.group(2)) if match.group(2) is not None else None
    offset = int(match.group(3)) if match.group(3) is not None else None
    return JobRef(base=base, array_task=task, het_offset=offset)


# --------------------------------------------------------------------------------------------
# The job record every parser returns
# --------------------------------------------------------------------------------------------


class JobNodeDetail(NamedTuple):
    """One ``scontrol -d`` detail line: the same CPUs/memory/GRES on every listed node."""

    nodes: tuple[str, ...]
    cpu_ids: str  # as printed; Slurm may truncate it itself ("...,112,115-")
    mem: str | None  # MB, as printed
    gres: str | None  # "gpu(IDX:0,2-3,5)", "gpu:rtx2080:1(IDX:1),gg:g0(CNT:1)"


@dataclass(frozen=True)
class SlurmJob:
    """One job record from scontrol/squeue, text or JSON, any Slurm version from 14 to 25."""

    job_id: str
    name: str | None = None
    user: str | None = None
    state: str | None = None
    reason: str | None = None
    partition: str | None = None
    account: str | None = None
    nodes: tuple[str, ...] = ()
    batch_host: str | None = None
    num_nodes: int | None = None
    num_tasks: int | None = None
    num_cpus: int | None = None
    array_job_id: str | None = None
    array_task_id: str | None = None
    het_job_id: str | None = None
    het_job_offset: int | None = None
    submit_time: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    run_time: str | None = None
    time_limit: str | None = None
    command: str | None = None
    work_dir: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    tres: str | None = None  # allocated TRES, or the requested ones while nothing is allocated
    details: tuple[JobNodeDetail, ...] = ()
    # Every key of the record as printed (detail-line keys live in `details` only).
    raw: dict[str, str] = field(default_factory=dict, hash=False, repr=False)

    @property
    def het_group(self) -> tuple[str, int] | None:
        """(leader's id, offset) of a heterogeneous job's component, what srun's ``--jobid``
        and ``--het-group`` take (srun refuses the component's own id); None otherwise."""
        if self.het_job_id and self.het_job_offset is not None:
            return (self.het_job_id, self.het_job_offset)
        return None


_NO_VALUE = frozenset({"", "(null)", "Unknown", "N/A", "None", "NONE", "n/a"})


def _clean(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value in _NO_VALUE else value


def _leading_int(value: str | None) -> int | None:
    """``"2-2"`` (NumNodes min-max) -> 2, ``"64"`` -> 64, ``"N/A"`` -> None."""
    if value is None:
        return None
    match = re.match(r"\s*([0-9]{1,18})(?![0-9])", value)
    return int(match.group(1)) if match else None


def _expand_or_keep(expr: str | None) -> tuple[str, ...]:
    """Expand a host list; if Slurm ever prints one we cannot read, keep the raw pieces."""
    expr = _clean(expr)
    if expr is None:
        return ()
    try:
        return tuple(expand_hostlist(expr))
    except ValueError:
        return tuple(p for p in re.split(r"[,\s]+", expr) if p)


# --------------------------------------------------------------------------------------------
# scontrol show job (text, multi-line and -o one-liner)
# --------------------------------------------------------------------------------------------

# A key starts at the beginning or after whitespace. Keys carry ':' and '/'
# (AllocNode:Sid, ReqB:S:C:T, CPUs/Task); NtasksPerTRES is printed with ':' instead of '='.
_KEY_RE = re.compile(r"(?<!\S)(?:(?P<key>[A-Za-z][A-Za-z0-9_:/]*)=|(?P<colon_key>NtasksPerTRES):)")

# Values that are user text and may hold spaces or 'word=' (Command=/x/run.sh sims_A=900).
# In the multi-line form Slurm prints each of them last on its line, so the line end bounds them;
# in the one-liner form only a key from _KNOWN_JOB_KEYS may end them.
_FREE_TEXT_KEYS = frozenset(
    {
        "JobName", "Name", "Command", "WorkDir", "StdErr", "StdIn", "StdOut", "Comment",
        "AdminComment", "SystemComment", "Extra", "SubmitLine",
    }
)  # fmt: skip

_KNOWN_JOB_KEYS = _FREE_TEXT_KEYS | frozenset(
    {
        "JobId", "ArrayJobId", "ArrayTaskId", "ArrayTaskThrottle", "HetJobId", "HetJobOffset",
        "HetJobIdSet", "PackJobId", "PackJobOffset", "PackJobIdSet", "UserId", "GroupId",
        "MCS_label", "Priority", "Nice", "Account", "QOS", "WCKey", "JobState", "Reason",
        "Dependency", "Requeue", "Restarts", "BatchFlag", "Reboot", "ExitCode", "DerivedExitCode",
        "RunTime", "TimeLimit", "TimeMin", "SubmitTime", "EligibleTime", "AccrueTime",
        "StartTime", "EndTime", "Deadline", "PreemptEligibleTime", "PreemptTime", "SuspendTime",
        "SecsPreSuspend", "LastSchedEval", "Scheduler", "Partition", "AllocNode:Sid",
        "ReqNodeList", "ExcNodeList", "NodeList", "SchedNodeList", "BatchHost", "FedOrigin",
        "FedViableSiblings", "FedActiveSiblings", "NumNodes", "NumCPUs", "NumTasks", "CPUs/Task",
        "ReqB:S:C:T", "ReqS:C:T", "TRES", "ReqTRES", "AllocTRES", "Socks/Node",
        "NtasksPerN:B:S:C", "CoreSpec", "JOB_GRES", "Nodes", "CPU_IDs", "Mem", "GRES_IDX", "GRES",
        "MinCPUsNode", "MinMemoryNode", "MinMemoryCPU", "MinTmpDiskNode", "Features", "DelayBoot",
        "ClusterFeatures", "Gres", "Reservation", "OverSubscribe", "Shared", "Contiguous",
        "Licenses", "LicensesAlloc", "Network", "Power", "TresPerNode", "TresPerJob",
        "TresPerSocket", "TresPerTask", "TresBind", "TresFreq", "CpusPerTres", "MemPerTres",
        "NtasksPerTRES", "MailUser", "MailType", "BurstBuffer", "BurstBufferState", "CpuFreqMin",
        "CpuFreqMax", "CpuFreqGov", "KillOInInvalidDependent", "Container", "ContainerID",
        "Prefer", "ResizeTime", "ResvPorts", "SpreadJob", "OOMKillStep", "Segment",
        "ThreadSpec", "Profile", "SelinuxContext", "CronJob", "CrontabSpec", "NumTasksPerBoard",
    }
)  # fmt: skip

_DETAIL_KEYS = frozenset({"Nodes", "CPU_IDs", "Mem", "GRES_IDX", "GRES"})


def parse_scontrol_job(text: str) -> list[SlurmJob]:
    """Parse ``scontrol show job [-d] [-o]`` text: multi-line records or one record per line.

    Empty output and ``No jobs in the system`` give ``[]``; text with no ``JobId=`` record at all
    raises ``ParseError``. Lines outside records (epilogue banners, separators) are ignored.
    """
    records = _split_records(text, "JobId=")
    if not records:
        stripped = text.strip()
        if not stripped or stripped.startswith("No jobs in the system"):
            return []
        first_line = stripped.splitlines()[0][:120]
        raise ParseError(f"no 'JobId=' record in scontrol output (starts with {first_line!r})")
    jobs = []
    for record in records:
        pairs = _tokenize_record(record)
        _check_not_forged(pairs)
        jobs.append(_job_from_pairs(pairs))
    return jobs


class ForgedJobRecord(ParseError):
    """scontrol text whose fields a job's own text (its name, a path) could have forged."""

    default_hint = "slurmdiag reads such a job from 'squeue --json' (Slurm 22.05+) instead"


# The fields slurmdiag trusts, in the order every Slurm version prints them (JobName is the 2nd
# field; Command, WorkDir and the Std* paths come late, after NodeList). Their values may hold
# spaces and ' Key=value' text, so a job named 'x UserId=root StdOut=/etc/shadow' makes those
# keys appear twice or out of this order: such a record is refused, never resolved by guessing.
_IDENTITY_RANK = {
    "JobId": 0, "JobName": 1, "UserId": 2, "GroupId": 3, "JobState": 4, "NodeList": 5,
    "Command": 6, "WorkDir": 6, "StdErr": 6, "StdIn": 6, "StdOut": 6,
}  # fmt: skip


def _check_not_forged(pairs: list[tuple[str, str]]) -> None:
    seen: set[str] = set()
    last = -1
    for key, _ in pairs:
        if key in _DETAIL_KEYS:
            continue
        if key in seen:
            raise ForgedJobRecord(f"scontrol printed {key}= twice in one job record: a job name "
                                  "or path holds field text")
        seen.add(key)
        position = _IDENTITY_RANK.get(key)
        if position is not None:
            if position < last:
                raise ForgedJobRecord(f"scontrol printed {key}= out of Slurm's order: a job name "
                                      "or path holds field text")
            last = position


def _split_records(text: str, first_key: str) -> list[str]:
    """Cut output into records: a line starting with ``first_key`` plus its indented lines."""
    records: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(first_key):
            current = [line]
            records.append(current)
        elif current is not None and line[:1] in (" ", "\t") and line.strip():
            current.append(line)
        else:
            current = None  # blank line or foreign text ends a record
    return ["\n".join(lines) for lines in records]


def _tokenize_record(record: str) -> list[tuple[str, str]]:
    """Split one record into (key, value) pairs; a value runs up to the next key."""
    multi_line = "\n" in record
    matches = list(_KEY_RE.finditer(record))
    pairs: list[tuple[str, str]] = []
    i = 0
    while i < len(matches):
        match = matches[i]
        key = match.group("key") or match.group("colon_key")
        start = match.end()
        j = i + 1
        if key in _FREE_TEXT_KEYS:
            if multi_line:
                line_end = record.find("\n", start)
                end = len(record) if line_end < 0 else line_end
                while j < len(matches) and matches[j].start() < end:
                    j += 1
            else:
                while j < len(matches) and not _is_known_key(matches[j]):
                    j += 1
                end = matches[j].start() if j < len(matches) else len(record)
        else:
            end = matches[j].start() if j < len(matches) else len(record)
        pairs.append((key, record[start:end].strip()))
        i = j
    return pairs


def _is_known_key(match: re.Match[str]) -> bool:
    return match.group("colon_key") is not None or match.group("key") in _KNOWN_JOB_KEYS


def _job_from_pairs(pairs: list[tuple[str, str]]) -> SlurmJob:
    raw: dict[str, str] = {}
    details: list[JobNodeDetail] = []
    open_detail: dict[str, str] | None = None

    def close_detail() -> None:
        if open_detail is not None:
            details.append(
                JobNodeDetail(
                    nodes=_expand_or_keep(open_detail.get("Nodes")),
                    cpu_ids=open_detail.get("CPU_IDs", ""),
                    mem=_clean(open_detail.get("Mem")),
                    gres=_clean(open_detail.get("GRES", open_detail.get("GRES_IDX"))),
                )
            )

    for key, value in pairs:
        if key == "Nodes":
            close_detail()
            open_detail = {"Nodes": value}
        elif key in _DETAIL_KEYS and open_detail is not None:
            open_detail[key] = value
        else:
            close_detail()
            open_detail = None
            raw.setdefault(key, value)
    close_detail()

    def get(*keys: str) -> str | None:
        for key in keys:
            value = _clean(raw.get(key))
            if value is not None:
                return value
        return None

    user = get("UserId")
    if user is not None:
        user = re.sub(r"\(\d+\)$", "", user) or user
    het_offset = get("HetJobOffset", "PackJobOffset")
    return SlurmJob(
        job_id=raw.get("JobId", "").strip(),
        name=get("JobName", "Name"),
        user=user,
        state=get("JobState"),
        reason=get("Reason"),
        partition=get("Partition"),
        account=get("Account"),
        nodes=_expand_or_keep(raw.get("NodeList")),
        batch_host=get("BatchHost"),
        num_nodes=_leading_int(get("NumNodes")),
        num_tasks=_leading_int(get("NumTasks")),
        num_cpus=_leading_int(get("NumCPUs")),
        array_job_id=get("ArrayJobId"),
        array_task_id=get("ArrayTaskId"),
        het_job_id=get("HetJobId", "PackJobId"),
        het_job_offset=_leading_int(het_offset),
        submit_time=get("SubmitTime"),
        start_time=get("StartTime"),
        end_time=get("EndTime"),
        run_time=get("RunTime"),
        time_limit=get("TimeLimit"),
        command=get("Command"),
        work_dir=get("WorkDir"),
        stdout=get("StdOut"),
        stderr=get("StdErr"),
        tres=get("AllocTRES", "TRES", "ReqTRES"),
        details=tuple(details),
        raw=raw,
    )


def parse_scontrol_node_addrs(text: str) -> dict[str, str]:
    """Map NodeName to NodeAddr from ``scontrol show node [-o]`` text (nodes without one omitted).

    Empty output gives ``{}``; text without any ``NodeName=`` record raises ``ParseError``.
    """
    records = _split_records(text, "NodeName=")
    if not records:
        if not text.strip() or "No nodes in the system" in text:
            return {}
        first_line = text.strip().splitlines()[0][:120]
        raise ParseError(f"no 'NodeName=' record in scontrol output (starts with {first_line!r})")
    addrs: dict[str, str] = {}
    for record in records:
        fields = dict(_tokenize_record(record))
        name, addr = _clean(fields.get("NodeName")), _clean(fields.get("NodeAddr"))
        if name is not None and addr is not None:
            addrs[name] = addr
    return addrs


# --------------------------------------------------------------------------------------------
# JSON: scontrol show job --json, squeue --json, slurmrestd /job responses
# --------------------------------------------------------------------------------------------

# uint32 INFINITE / NO_VAL as plain ints in data_parser v0.0.37 and older
_U32_INFINITE = 0xFFFFFFFF
_U32_NO_VAL = 0xFFFFFFFE


def parse_scontrol_job_json(text: str) -> list[SlurmJob]:
    """Parse ``scontrol show job --json`` / slurmrestd job output (data_parser v0.0.37 to v0.0.44)."""
    return _parse_jobs_json(text, "scontrol --json")


def parse_squeue_json(text: str) -> list[SlurmJob]:
    """Parse ``squeue --json`` output; same schema as ``scontrol show job --json``."""
    return _parse_jobs_json(text, "squeue --json")


def _parse_jobs_json(text: str, source: str) -> list[SlurmJob]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"{source} output is not JSON: {exc}") from exc
    if isinstance(document, list):
        entries: Any = document
    elif isinstance(document, dict) and isinstance(document.get("jobs"), list):
        entries = document["jobs"]
    elif isinstance(document, dict) and "job_id" in document:
        entries = [document]
    else:
        raise ParseError(f"{source} output has no 'jobs' list")
    return [_job_from_json(entry) for entry in entries if isinstance(entry, dict)]


def _number(value: Any) -> int | float | None:
    """Unwrap v0.0.39+ ``{"set","infinite","number"}``; ``math.inf`` for infinite, None if unset."""
    if isinstance(value, dict):
        if value.get("infinite"):
            return math.inf
        if not value.get("set", True):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value == _U32_INFINITE:
        return math.inf
    if value == _U32_NO_VAL:
        return None
    return value


def _int_field(value: Any) -> int | None:
    number = _number(value)
    return None if number is None or number == math.inf else int(number)


def _epoch_field(value: Any) -> str | None:
    seconds = _int_field(value)
    if not seconds:  # 0 means "not known" in every schema version
        return None
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat()


def _minutes_field(value: Any) -> str | None:
    """Time limit in minutes -> Slurm's ``D-HH:MM:SS`` / ``HH:MM:SS`` / ``UNLIMITED``."""
    minutes = _number(value)
    if minutes is None:
        return None
    if minutes == math.inf:
        return "UNLIMITED"
    days, rest = divmod(int(minutes), 24 * 60)
    hours, mins = divmod(rest, 60)
    clock = f"{hours:02d}:{mins:02d}:00"
    return f"{days}-{clock}" if days else clock


def _str_field(value: Any) -> str | None:
    return _clean(value) if isinstance(value, str) else None


def _flatten_json(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    if value is None:
        return ""
    if isinstance(value, dict) and "number" in value and "set" in value:
        number = _number(value)
        return "" if number is None else ("infinite" if number == math.inf else str(number))
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) for v in value):
        return ",".join(str(v) for v in value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _job_from_json(job: Mapping[str, Any]) -> SlurmJob:
    state_value = job.get("job_state")
    if isinstance(state_value, list):
        state = str(state_value[0]) if state_value else None
    else:
        state = _str_field(state_value)

    array_job = _int_field(job.get("array_job_id"))
    array_job_id = str(array_job) if array_job else None
    array_task = _int_field(job.get("array_task_id"))
    if array_task is not None and array_job_id is not None:
        array_task_id: str | None = str(array_task)
    elif array_job_id is not None:
        # The pending meta-record of an array: tasks as a range, like scontrol's ArrayTaskId=1-10
        array_task_id = _str_field(job.get("array_task_string"))
    else:
        array_task_id = None

    het_job = _int_field(job.get("het_job_id"))
    het_job_id = str(het_job) if het_job else None
    het_job_offset = _int_field(job.get("het_job_offset")) if het_job_id else None

    user = _str_field(job.get("user_name"))
    if user is None and job.get("user_id") is not None:
        user = str(job.get("user_id"))

    nodes = _expand_or_keep(_str_field(job.get("nodes")))
    stdout = _str_field(job.get("stdout_expanded")) or _str_field(job.get("standard_output"))
    # scontrol text shows the stdout path as StdErr when stderr is not split; mirror that.
    stderr = _str_field(job.get("stderr_expanded")) or _str_field(job.get("standard_error"))
    stderr = stderr or stdout

    job_id = _int_field(job.get("job_id"))
    return SlurmJob(
        job_id=str(job_id) if job_id is not None else str(job.get("job_id", "")),
        name=_str_field(job.get("name")),
        user=user,
        state=state,
        reason=_str_field(job.get("state_reason")),
        partition=_str_field(job.get("partition")),
        account=_str_field(job.get("account")),
        nodes=nodes,
        batch_host=_str_field(job.get("batch_host")),
        num_nodes=_int_field(job.get("node_count")),
        num_tasks=_int_field(job.get("tasks")),
        num_cpus=_int_field(job.get("cpus")),
        array_job_id=array_job_id,
        array_task_id=array_task_id,
        het_job_id=het_job_id,
        het_job_offset=het_job_offset,
        submit_time=_epoch_field(job.get("submit_time")),
        start_time=_epoch_field(job.get("start_time")),
        end_time=_epoch_field(job.get("end_time")),
        run_time=None,  # not part of the JSON record
        time_limit=_minutes_field(job.get("time_limit")),
        command=_str_field(job.get("command")),
        work_dir=_str_field(job.get("current_working_directory")),
        stdout=stdout,
        stderr=stderr,
        tres=_str_field(job.get("tres_alloc_str")) or _str_field(job.get("tres_req_str")),
        details=_json_details(job, nodes),
        raw={str(k): _flatten_json(v) for k, v in job.items()},
    )


def _json_details(job: Mapping[str, Any], nodes: tuple[str, ...]) -> tuple[JobNodeDetail, ...]:
    """Per-node allocation from ``job_resources`` (v0.0.40+ list, or v0.0.37 index dict)."""
    resources = job.get("job_resources")
    if not isinstance(resources, dict):
        return ()
    gres_detail = job.get("gres_detail")
    gres_list = gres_detail if isinstance(gres_detail, list) else []

    def gres_for(index: int) -> str | None:
        return _str_field(gres_list[index]) if index < len(gres_list) else None

    details: list[JobNodeDetail] = []
    node_block = resources.get("nodes")
    allocation = node_block.get("allocation") if isinstance(node_block, dict) else None
    threads = _int_field(resources.get("threads_per_core")) or 1
    if isinstance(allocation, list):
        for position, node in enumerate(allocation):
            if not isinstance(node, dict):
                continue
            index = node.get("index", position)
            index = index if isinstance(index, int) else position
            memory = node.get("memory")
            mem = memory.get("allocated") if isinstance(memory, dict) else None
            details.append(
                JobNodeDetail(
                    nodes=(str(node.get("name", "")),),
                    cpu_ids=_allocated_cpu_ids(node.get("sockets"), threads),
                    mem=str(mem) if mem is not None else None,
                    gres=gres_for(index),
                )
            )
        return tuple(details)
    allocated = resources.get("allocated_nodes")
    if isinstance(allocated, dict):  # v0.0.37: {"0": {"memory": .., "cpus": ..}}, names by index
        for key, node in allocated.items():
            index = decimal_int(str(key))
            if not isinstance(node, dict) or index is None:
                continue
            name = nodes[index] if index < len(nodes) else ""
            mem = node.get("memory")
            details.append(
                JobNodeDetail(
                    nodes=(name,),
                    cpu_ids="",  # v0.0.37 only says "unassigned" per socket/core
                    mem=str(mem) if mem is not None else None,
                    gres=gres_for(index),
                )
            )
    return tuple(details)


def _allocated_cpu_ids(sockets: Any, threads: int) -> str:
    """Global CPU ids of the cores marked ALLOCATED (socket-major numbering, x threads/core)."""
    if not isinstance(sockets, list):
        return ""
    cpu_ids: list[int] = []
    core_base = 0
    for socket in sockets:
        cores = socket.get("cores") if isinstance(socket, dict) else None
        if not isinstance(cores, list):
            continue
        for position, core in enumerate(cores):
            status = core.get("status") if isinstance(core, dict) else None
            if isinstance(status, list) and "ALLOCATED" in status:
                index = core.get("index", position)
                core_id = core_base + (index if isinstance(index, int) else position)
                cpu_ids.extend(range(core_id * threads, core_id * threads + threads))
        core_base += len(cores)
    return format_int_ranges(cpu_ids)


# --------------------------------------------------------------------------------------------
# squeue text
# --------------------------------------------------------------------------------------------

# Field names of SQUEUE_TEXT_FORMAT, in squeue --Format (-O) vocabulary. NAME is last so a job
# name holding the delimiter cannot shift the other columns.
SQUEUE_TEXT_FIELDS: tuple[str, ...] = (
    "JOBID",  # %A  unique id (an array task's own id)
    "JOBARRAYID",  # %i  123, 123_4, 123_[1-10%2] (pending array), 123+1 (het component)
    "USERNAME",  # %u
    "STATE",  # %T  long form (RUNNING)
    "REASON",  # %r
    "PARTITION",  # %P
    "NUMNODES",  # %D
    "NUMCPUS",  # %C
    "TIMEUSED",  # %M
    "TIMELIMIT",  # %l
    "STARTTIME",  # %S
    "SUBMITTIME",  # %V
    "NODELIST",  # %N  compressed host list, empty while pending
    "NAME",  # %j
)
SQUEUE_TEXT_DELIMITER = "|"
#: Use as ``squeue -h -o SQUEUE_TEXT_FORMAT``; the columns are SQUEUE_TEXT_FIELDS.
SQUEUE_TEXT_FORMAT = "%A|%i|%u|%T|%r|%P|%D|%C|%M|%l|%S|%V|%N|%j"


def parse_squeue_text(
    text: str,
    fields: Sequence[str] = SQUEUE_TEXT_FIELDS,
    delimiter: str = SQUEUE_TEXT_DELIMITER,
) -> list[SlurmJob]:
    """Parse delimited squeue output whose columns are ``fields`` (squeue ``-O`` names).

    The default matches ``squeue -h -o SQUEUE_TEXT_FORMAT``. Other layouts work too, e.g.
    ``squeue -h -O JOBID:|#,NAME:|#,...`` (every field followed by the delimiter). A header line
    is skipped. Non-empty text without a single row of the expected width raises ``ParseError``.
    """
    names = [f.strip().upper() for f in fields]
    lines = [line for line in text.splitlines() if line.strip()]
    # squeue -O "X:<delim>,..." ends every row with the delimiter; plain -o rows do not.
    suffixed = bool(lines) and all(line.endswith(delimiter) for line in lines)
    jobs: list[SlurmJob] = []
    for line in lines:
        if suffixed:
            line = line[: -len(delimiter)]
        parts = line.split(delimiter, len(names) - 1)
        if len(parts) != len(names):
            continue
        if parts[0].strip().upper() == names[0]:
            continue  # header
        jobs.append(_job_from_squeue_row(dict(zip(names, (p.strip() for p in parts)))))
    header_only = len(lines) == 1 and lines[0].split(delimiter)[0].strip().upper() == names[0]
    if lines and not jobs and not header_only:
        raise ParseError(
            f"no squeue row with {len(names)} columns (starts with {lines[0][:120]!r})"
        )
    return jobs


_SQUEUE_ID_RE = re.compile(r"^([0-9]{1,18})(?:_\[?([^\]]*)\]?|\+([0-9]{1,18}))?$")


def _job_from_squeue_row(row: dict[str, str]) -> SlurmJob:
    def get(*keys: str) -> str | None:
        for key in keys:
            value = _clean(row.get(key))
            if value is not None:
                return value
        return None

    array_job_id = array_task_id = het_job_id = None
    het_job_offset = None
    display_id = get("JOBARRAYID")
    match = _SQUEUE_ID_RE.match(display_id or "")
    if match:
        if match.group(2) is not None:
            array_job_id, array_task_id = match.group(1), match.group(2) or None
        elif match.group(3) is not None:
            het_job_id, het_job_offset = match.group(1), int(match.group(3))
    # Without %A the display id (123_4, 123+1) is the only unique name we have.
    job_id = get("JOBID") or display_id

    return SlurmJob(
        job_id=job_id or "",
        name=get("NAME"),
        user=get("USERNAME", "USER"),
        state=get("STATE", "STATECOMPACT"),
        reason=get("REASON"),
        partition=get("PARTITION"),
        account=get("ACCOUNT"),
        nodes=_expand_or_keep(row.get("NODELIST")),
        batch_host=get("BATCHHOST"),
        num_nodes=_leading_int(get("NUMNODES")),
        num_tasks=_leading_int(get("NUMTASKS")),
        num_cpus=_leading_int(get("NUMCPUS")),
        array_job_id=array_job_id,
        array_task_id=array_task_id,
        het_job_id=het_job_id,
        het_job_offset=het_job_offset,
        submit_time=get("SUBMITTIME"),
        start_time=get("STARTTIME"),
        end_time=get("ENDTIME"),
        run_time=get("TIMEUSED"),
        time_limit=get("TIMELIMIT"),
        command=get("COMMAND"),
        work_dir=get("WORKDIR"),
        stdout=get("STDOUT"),
        stderr=get("STDERR"),
        tres=get("TRES-ALLOC"),
        raw=dict(row),
    )

"""Slurm's record of a finished job: ``sacct`` (JSON where it has it, ``--parsable2`` text
otherwise) and, without accounting, what slurmctld still holds (``scontrol show job``).

Three steps as everywhere in slurmdiag: build the argv (pure), run it (``transport.run``), parse
the text (pure, tested on real outputs of Slurm 22.05, 24.05 and 25.11).

Versions differ (see fixtures/PITFALLS.md): data_parser v0.0.38 (22.05) gives ``state.current``
as a string, step ids as numbers and plain ints; v0.0.39+ give lists of states, step ids
``"J.batch"`` and numbers wrapped as ``{set, infinite, number}``. Slurm 22.05's ``sacct --json``
reports ``exit_code`` 0/SUCCESS for a step that exited 3 (the text says ``3:0``): exit codes of
a v0.0.38 record are therefore taken from the text output (``overlay_exit_codes``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from slurmdiag.errors import ParseError
from slurmdiag.safeio import decimal_int

# Fields every sacct since 20.11 has, in the order the text parser expects none of: the header
# line names them.
TEXT_FIELDS = (
    "JobID", "JobName", "State", "ExitCode", "DerivedExitCode", "NodeList", "NNodes", "NTasks",
    "Start", "End", "Elapsed", "Timelimit", "User", "WorkDir", "Reason",
    "JobIDRaw",  # a het component's own id (JobID prints it as LEADER+OFFSET)
    "SubmitLine",  # last: it may hold '|' itself, and newlines (a multi-line srun command)
)
FAILURE_STATES = ("FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE",
                  "PREEMPTED")
# sacct's own fields for a job that has not finished.
UNFINISHED_STATES = ("PENDING", "RUNNING", "SUSPENDED", "REQUEUED", "RESIZING", "COMPLETING",
                     "CONFIGURING", "STOPPED", "SIGNALING", "STAGE_OUT")
SIGNAL_NAMES = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS",
                8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2",
                13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM"}


@dataclass(frozen=True)
class AcctRecord:
    """One line of sacct: the job itself (``step`` None) or one of its steps."""

    job_id: str  # the job's id, without the step
    step: str | None  # None for the job; "0", "1", "batch", "extern", "interactive"
    name: str | None = None
    state: str = "UNKNOWN"  # FAILED, TIMEOUT, CANCELLED, OUT_OF_MEMORY, NODE_FAIL, COMPLETED...
    cancelled_by: str | None = None  # user name or uid that cancelled it
    exit_code: int | None = None
    signal: int | None = None
    nodes: str | None = None  # hostlist expression as sacct prints it
    node_list: tuple[str, ...] = ()
    ntasks: int | None = None
    start: str | None = None
    end: str | None = None
    elapsed_s: int | None = None
    time_limit: str | None = None
    user: str | None = None
    work_dir: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    reason: str | None = None
    failed_node: str | None = None
    submit_line: str | None = None
    het_job_id: str | None = None  # a heterogeneous job's component: its leader's id
    het_offset: int | None = None  # and its offset (0: the leader)

    @property
    def label(self) -> str:
        """The job as Slurm's own listings name it: ``123``, or a het component ``123+1``."""
        if self.het_job_id and self.het_offset is not None:
            return f"{self.het_job_id}+{self.het_offset}"
        return self.job_id

    @property
    def step_id(self) -> str:
        return self.label if self.step is None else f"{self.label}.{self.step}"

    @property
    def failed(self) -> bool:
        return self.state in FAILURE_STATES or (
            self.state == "CANCELLED" and self.cancelled_by is None and self.signal not in (None, 0)
        )


def build_sacct_argv(job_id: str, *, as_json: bool) -> list[str]:
    """``sacct -j J``: with -j sacct searches all time, not only today; steps included."""
    argv = ["sacct", "-j", job_id]
    if as_json:
        return [*argv, "--json"]
    return [*argv, "--parsable2", "--format", ",".join(TEXT_FIELDS)]


def build_scontrol_job_argv(job_id: str) -> list[str]:
    return ["scontrol", "show", "job", "-d", "-o", job_id]


# ---------------------------------------------------------------------------------------------
# JSON (sacct --json, slurmrestd /slurmdb/)


def _number(value: Any) -> int | None:
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, str):
        return decimal_int(value)
    return None


def _state(value: Any) -> str:
    if isinstance(value, Mapping):
        value = value.get("current", "UNKNOWN")
    if isinstance(value, list):
        value = value[0] if value else "UNKNOWN"
    return str(value or "UNKNOWN").upper()


def _exit(value: Any) -> tuple[int | None, int | None]:
    if not isinstance(value, Mapping):
        return None, None
    code = _number(value.get("return_code"))
    signal = value.get("signal")
    sig = None
    if isinstance(signal, Mapping):
        sig = _number(signal.get("id", signal.get("signal_id")))
    return code, sig or None


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def _time(block: Any, key: str) -> str | None:
    if not isinstance(block, Mapping):
        return None
    seconds = _number(block.get(key))
    if not seconds:
        return None
    import datetime as _dt

    return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).isoformat(timespec="seconds")


def _json_het(job: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """(leader's id, offset) of a het job's component; (None, None) for any other job (whose
    ``het`` block says job_id 0)."""
    het = job.get("het")
    if not isinstance(het, Mapping):
        return None, None
    leader = _number(het.get("job_id"))
    offset = _number(het.get("job_offset"))
    if not leader or offset is None:
        return None, None
    return str(leader), offset


def _json_step(job: Mapping[str, Any], raw: Mapping[str, Any]) -> AcctRecord:
    step = raw.get("step") or {}
    sid = step.get("id")
    if isinstance(sid, Mapping):  # some versions: {"job_id": J, "step_id": S}
        sid = sid.get("step_id")
    sid_text = str(sid) if sid is not None else "?"
    if "." in sid_text:
        sid_text = sid_text.split(".", 1)[1]
    code, sig = _exit(raw.get("exit_code"))
    nodes = raw.get("nodes") or {}
    tasks = raw.get("tasks") or {}
    het_job_id, het_offset = _json_het(job)
    return AcctRecord(
        job_id=str(job.get("job_id")),
        het_job_id=het_job_id,
        het_offset=het_offset,
        step=sid_text,
        name=_text(step.get("name")),
        state=_state(raw.get("state")),
        cancelled_by=_text(raw.get("kill_request_user")),
        exit_code=code,
        signal=sig,
        nodes=_text(nodes.get("range")) if isinstance(nodes, Mapping) else _text(nodes),
        node_list=tuple(nodes.get("list") or ()) if isinstance(nodes, Mapping) else (),
        ntasks=_number(tasks.get("count")) if isinstance(tasks, Mapping) else None,
        start=_time(raw.get("time"), "start"),
        end=_time(raw.get("time"), "end"),
        elapsed_s=_number((raw.get("time") or {}).get("elapsed")),
    )


def parse_sacct_json(text: str) -> list[AcctRecord]:
    """The job and step records of ``sacct --json`` (any data_parser version)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(f"sacct --json output is not JSON: {exc}") from None
    if not isinstance(data, Mapping) or not isinstance(data.get("jobs"), list):
        raise ParseError("sacct --json output has no 'jobs' list")
    records: list[AcctRecord] = []
    for job in data["jobs"]:
        if not isinstance(job, Mapping):
            continue
        code, sig = _exit(job.get("exit_code"))
        state = job.get("state") or {}
        time_block = job.get("time") or {}
        limit = _number(time_block.get("limit")) if isinstance(time_block, Mapping) else None
        het_job_id, het_offset = _json_het(job)
        records.append(
            AcctRecord(
                job_id=str(job.get("job_id")),
                het_job_id=het_job_id,
                het_offset=het_offset,
                step=None,
                name=_text(job.get("name")),
                state=_state(state),
                cancelled_by=_text(job.get("kill_request_user")),
                exit_code=code,
                signal=sig,
                nodes=_text(job.get("nodes")),
                start=_time(time_block, "start"),
                end=_time(time_block, "end"),
                elapsed_s=_number(time_block.get("elapsed")) if isinstance(time_block, Mapping) else None,
                time_limit=f"{limit} min" if limit else None,
                user=_text(job.get("user")),
                work_dir=_text(job.get("working_directory")),
                stdout=_text(job.get("stdout_expanded")) or _text(job.get("stdout")),
                stderr=_text(job.get("stderr_expanded")) or _text(job.get("stderr")),
                reason=_text(state.get("reason")) if isinstance(state, Mapping) else None,
                failed_node=_text(job.get("failed_node")),
                submit_line=_text(job.get("submit_line")),
            )
        )
        for raw in job.get("steps") or ():
            if isinstance(raw, Mapping):
                records.append(_json_step(job, raw))
    return records


def json_exit_codes_unreliable(text: str) -> bool:
    """True for data_parser v0.0.38 (Slurm 22.05), whose exit codes read 0 for failed steps."""
    try:
        meta = json.loads(text).get("meta") or {}
    except (json.JSONDecodeError, AttributeError):
        return False
    plugin = (meta.get("plugin") or {}).get("type", "") if isinstance(meta, Mapping) else ""
    return "v0.0.38" in str(plugin) or "v0.0.37" in str(plugin)


# ---------------------------------------------------------------------------------------------
# text (sacct --parsable2)

_CANCELLED_BY = re.compile(r"^CANCELLED(?: by (?P<who>\S+))?")
# The JobID of a record line: 123, 123.batch, 123_4, 123_[1-3], 123+1.0 (not a submit line's).
_RECORD_ID = re.compile(r"^\d+(?:_(?:\d+|\[[\d,\-%]+\]))?(?:\+\d+)?(?:\.[\w-]+)?$")
_EXIT = re.compile(r"^(?P<code>\d+):(?P<signal>\d+)$")


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """Slurm's ``code:signal`` (``0:15``, ``139:0``) into (exit code, signal or None)."""
    match = _EXIT.match(text.strip())
    if not match:
        return None, None
    return int(match.group("code")), int(match.group("signal")) or None


def _elapsed_seconds(text: str) -> int | None:
    """``[D-]HH:MM:SS`` or ``MM:SS`` to seconds."""
    match = re.match(r"^(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)$", text or "")
    if not match:
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def _split_state(text: str) -> tuple[str, str | None]:
    match = _CANCELLED_BY.match(text)
    if match:
        return "CANCELLED", match.group("who")
    return (text.split()[0].upper() if text.strip() else "UNKNOWN"), None


def parse_sacct_parsable(text: str) -> list[AcctRecord]:
    """``sacct --parsable2 --format ...`` with a header line: records by the header's names."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = lines[0].split("|")
    if "JobID" not in header or "State" not in header:
        raise ParseError("sacct output has no header with JobID and State",
                         hint="run sacct with --parsable2 and without --noheader")
    rows: list[dict[str, str]] = []
    for line in lines[1:]:
        fields = line.split("|", len(header) - 1)
        if rows and (len(fields) < len(header) or not _RECORD_ID.match(fields[0])):
            # a line of a multi-line submit line (SubmitLine is last): it belongs to the row above
            rows[-1]["SubmitLine"] = rows[-1].get("SubmitLine", "") + "\n" + line
            continue
        rows.append(dict(zip(header, fields)))
    records = []
    for row in rows:
        job_id, _, step = row.get("JobID", "").partition(".")
        het_job_id, plus, offset = job_id.partition("+")
        het = None
        if plus and offset.isdigit():
            raw_id = row.get("JobIDRaw", "").partition(".")[0]
            het = (het_job_id, int(offset))
            # the component's own id where the listing has it (%j of its output file is that)
            job_id = raw_id if raw_id.isdigit() else (het_job_id if offset == "0" else job_id)
        state, who = _split_state(row.get("State", ""))
        code, sig = parse_exit_code(row.get("ExitCode", ""))
        records.append(
            AcctRecord(
                job_id=job_id,
                step=step or None,
                name=row.get("JobName") or None,
                state=state,
                cancelled_by=who,
                exit_code=code,
                signal=sig,
                nodes=row.get("NodeList") or None,
                ntasks=decimal_int(row.get("NTasks")),
                start=row.get("Start") if row.get("Start") not in (None, "", "Unknown", "None") else None,
                end=row.get("End") if row.get("End") not in (None, "", "Unknown", "None") else None,
                elapsed_s=_elapsed_seconds(row.get("Elapsed", "")),
                time_limit=row.get("Timelimit") or None,
                user=row.get("User") or None,
                work_dir=row.get("WorkDir") or None,
                reason=row.get("Reason") or None,
                submit_line=row.get("SubmitLine") or None,
                het_job_id=het[0] if het else None,
                het_offset=het[1] if het else None,
            )
        )
    return records


def overlay_exit_codes(records: Sequence[AcctRecord], text_records: Iterable[AcctRecord]) -> list[AcctRecord]:
    """Exit codes, signals and who cancelled, from the text records, by step id (a het
    component's steps by its label: the JSON names the component by its own id)."""
    by_id = {r.step_id: r for r in text_records}
    out = []
    for record in records:
        other = by_id.get(record.step_id)
        if other is None:
            out.append(record)
            continue
        out.append(replace(record, exit_code=other.exit_code, signal=other.signal,
                           cancelled_by=record.cancelled_by or other.cancelled_by,
                           time_limit=record.time_limit or other.time_limit,
                           submit_line=record.submit_line or other.submit_line))
    return out


# ---------------------------------------------------------------------------------------------
# slurmctld's memory of a finished job (scontrol show job -o), when there is no accounting


def record_from_scontrol(fields: Mapping[str, str]) -> AcctRecord:
    """The job record scontrol gives for a job slurmctld still holds (within MinJobAge)."""
    code, sig = parse_exit_code(fields.get("ExitCode", ""))
    user = fields.get("UserId", "")
    return AcctRecord(
        job_id=fields.get("JobId", "?"),
        step=None,
        name=fields.get("JobName"),
        state=(fields.get("JobState") or "UNKNOWN").upper(),
        exit_code=code,
        signal=sig,
        nodes=fields.get("NodeList") if fields.get("NodeList") not in (None, "(null)") else None,
        ntasks=decimal_int(fields.get("NumTasks")),
        start=fields.get("StartTime"),
        end=fields.get("EndTime"),
        elapsed_s=_elapsed_seconds(fields.get("RunTime", "")),
        time_limit=fields.get("TimeLimit"),
        user=user.split("(", 1)[0] or None,
        work_dir=fields.get("WorkDir"),
        stdout=fields.get("StdOut"),
        stderr=fields.get("StdErr"),
        reason=fields.get("Reason"),
    )


def signal_name(signal: int | None) -> str | None:
    if not signal:
        return None
    return SIGNAL_NAMES.get(signal, f"signal {signal}")


_OUTPUT_OPTION = re.compile(r"(?:^|\s)(?:-(?P<short>[oe])\s*|--(?P<long>output|error)[=\s])(?P<value>\S+)")


def output_paths_from_submit_line(record: AcctRecord) -> tuple[str | None, str | None]:
    """stdout and stderr files named by ``sbatch -o/-e`` in the submit line, %-patterns filled."""
    if not record.submit_line:
        return None, None
    out = err = None
    for match in _OUTPUT_OPTION.finditer(record.submit_line):
        which = match.group("short") or ("o" if match.group("long") == "output" else "e")
        value = expand_filename_pattern(match.group("value").strip("'\""), record)
        if record.work_dir and not value.startswith("/"):
            value = f"{record.work_dir.rstrip('/')}/{value}"
        if which == "o":
            out = value
        else:
            err = value
    return out, err


def expand_filename_pattern(pattern: str, record: AcctRecord) -> str:
    """sbatch's filename patterns that a finished job's record can fill: %j %J %x %u %%."""
    values = {"j": record.job_id, "J": record.job_id, "x": record.name or "", "u": record.user or "",
              "A": record.job_id, "%": "%"}
    return re.sub(r"%(\d*)([jJxuA%])", lambda m: values[m.group(2)], pattern)

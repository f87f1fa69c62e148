"""The collection, phase by phase (collect), and main: arguments, watchdog, the document out.

Phases: find the job's processes (see discovery) -> rank identity from environ -> K rounds of
``py-spy dump --json`` (ranks in parallel; the TCP sockets read from netlink during the first
round; a rank none of whose threads ran since its last dump keeps that sample) with ``strace -c``
tracing the ranks from the start (the rounds read with --nonblocking: a blocking py-spy and
strace cannot trace one process at once) -> GPUs and NICs (gathered on the side from the
start). Nothing blocks past ``deadline_s``: phases shrink or are skipped and say so in
"errors", and a SIGALRM just before the deadline emits whatever exists.
"""

import _signal
import posix as os
import sys
import time

from .discovery import (
    _ancestors,
    _as_int,
    _is_python,
    _launcher,
    classify,
    discover,
    sibling_stepd_descendants,
    stepd_descendants,
)
from .discovery import identity as rank_identity
from .filelocks import file_locks, read_in_background
from .flight import fr_collect, fr_request
from .framing import COLLECTOR_VERSION, FORMAT, Emitter, _write_line, loads
from .gpus import collect_gpus
from .nics import collect_nics
from .options import ArgsError, read_options
from .procfs import _read, allowed_env, read_stat, read_tracer
from .shells import shell_line
from .sockets import connection_list, recent_activity, socket_inode, tcp_sockets
from .sources import called_target
from .stacks import (
    _in_dataloader_loop,
    _io_counters,
    adopt_spawned_ranks,
    dump_stack,
    gloo_groups_ran,
    gloo_schedule,
    gloo_workers,
    idle_ms_of,
    read_schedule,
    reuse_sample,
    unchanged_sample,
)
from .strace import (
    _untraced_stat,
    finish_strace,
    join_tracing,
    start_strace,
    wait_attached,
)
from .syscalls import blocked_calls
from .tools import (
    FINISH_RESERVE_S,
    Clock,
    Task,
    _end_live_tools,
    _environ,
    _kill_live_tools,
    find_tool,
    pump_until,
    run_tasks,
    tool_run,
    wait_for_go,
)

# The watchdog (SIGALRM) fires this long before the deadline if the document is not out yet.
WATCHDOG_MARGIN_S = 0.15
# How long the first round waits for strace to attach to the ranks (see wait_attached).
ATTACH_WAIT_S = 0.3
# Said when discovery is done, if the controller sends a go (align_s): see sample_stacks.
READY_LINE = "@SDG1-READY {}\n"
# A process read runnable with no wait channel while its CPU over the window stayed under this
# (percent of a core) is read again for up to WOKEN_REREAD_S s (see reread_woken).
IDLE_CPU_PERCENT = 5.0
WOKEN_REREAD_S = 0.012
# The deadline of a collector whose arguments are unusable: it only reports them.
ARGS_ERROR_BUDGET_S = 5.0


def _enter_phase(status, phase):
    """Record how long the previous phase took (doc["timings"]), then start ``phase``."""
    now = time.monotonic()
    timings = status.setdefault("timings", {})
    if "since" in status:
        timings[status["phase"]] = round(now - status["since"], 3)
    status["phase"], status["since"] = phase, now


def side_work(nvidia_smi, clock, found):
    """Task: fills found["gpu"], then found["nics"]; a failure is a message, never lost stacks."""
    try:
        found["gpu"] = yield from collect_gpus(nvidia_smi, clock)
    except Exception as exc:  # noqa: BLE001 - GPUs must not cost the stacks
        found["gpu"] = {"status": "error", "message": f"collector bug: {exc!r}"}
    try:
        found["nics"] = yield from collect_nics(clock)
    except Exception as exc:  # noqa: BLE001 - nor NICs
        found["nics"] = {"interfaces": [], "ib_ports": [], "message": f"collector bug: {exc!r}"}


class Collection:
    """What the phases of one collection share, besides the document itself."""

    def __init__(self, options, clock, doc, status):
        self.options = options
        self.clock = clock
        self.doc = doc
        self.errors = doc["errors"]
        self.status = status
        self.procs = {}  # type: dict
        self.kept = []  # type: list
        self.entries = []  # type: list
        self.ranks = []  # type: list
        self.workers = []  # type: list
        self.rank_envs = {}  # type: dict
        # pid -> (monotonic time, CPU ticks, starttime against pid reuse)
        self.window_start = {}  # type: dict
        self.child_io = {}  # type: dict  # pid -> a child's /proc/PID/io at the window's start
        self.fr_requests = {}  # type: dict
        self.sockets = {}  # type: dict
        # pid -> its threads' schedule read before its last py-spy dump (in its round) (read_schedule)
        self.schedules = {}  # type: dict
        # a rank's gloo groups: pid -> their workers (gloo_workers, [] for none); the threads
        # watched are those groups' and then the main thread's ([pid]): without strace, how
        # long each had been idle before the first dump (idle_ms_of); their schedule after
        # it (gloo_schedule), where gloo_groups_ran starts; what that says at strace's
        # window's end (window_end), the main thread's last
        self.gloo_workers = {}  # type: dict
        self.gloo_idle = {}  # type: dict
        self.gloo_schedule = {}  # type: dict
        self.gloo_ran = {}  # type: dict
        # pid -> a rank's wait channel read just before its last round's dump (see sample_again)
        self.round_wchan = {}  # type: dict
        self.tracing = None  # (ranks traced, their strace tasks, the window's message) once started
        self.side = None  # type: Task | None
        self.side_found = {}  # type: dict
        self.page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
        self.locks_text = []  # type: list  # /proc/locks, read on a thread (read_in_background)

    def window_end(self, pid):
        """strace's window ends on ``pid`` (it has not let go yet): which gloo groups ran."""
        before = self.gloo_schedule.get(pid)
        if before:
            self.gloo_ran[pid] = gloo_groups_ran(pid, before)


def collect(options, clock, doc, status):
    """Fill ``doc`` in place (so that the watchdog can emit a partial one), phase by phase."""
    run = Collection(options, clock, doc, status)
    run.locks_text = read_in_background()
    find_tools(run)
    _enter_phase(status, "discovery")
    discover_processes(run)
    describe_processes(run)
    request_flight_recorder(run)
    _enter_phase(status, "py-spy sampling")
    sample_stacks(run)
    watch_tasks(run)
    _enter_phase(status, "process state")
    read_process_state(run)
    read_called_targets(run)
    _enter_phase(status, "strace")
    if run.tracing is not None:
        finish_strace(*run.tracing)
        read_recent_traffic(run)
    else:
        read_look_traffic(run)
    read_children_traffic(run)
    read_children_io(run)
    if options["flight_recorder"] and run.ranks:
        _enter_phase(status, "flight recorder")
        fr_collect(run.fr_requests, {e["pid"]: e for e in run.ranks}, run.rank_envs, clock,
                   options["fr_wait_s"])
    _enter_phase(status, "gpu and nic collection")
    finish_side_work(run)
    _enter_phase(status, "sockets")
    attach_connections(run)
    _enter_phase(status, "done")
    doc["timings"] = status["timings"]


def find_tools(run):
    tools = run.doc["tools"]
    tools["py-spy"] = find_tool("py-spy", run.options["pyspy"])
    tools["strace"] = find_tool("strace", run.options["strace"])
    tools["nvidia-smi"] = find_tool("nvidia-smi", run.options["nvidia_smi"])


def discover_processes(run):
    """The job's processes on this node (run.procs, classified), and the side task started."""
    options, clock, doc = run.options, run.clock, run.doc
    job_id, node = options["job_id"], doc["node"]
    listing = None
    own_step = None
    own_env = _environ()
    if (own_env.get("SLURM_JOB_ID") or own_env.get("SLURM_JOBID")) == job_id:
        own_step = own_env.get("SLURM_STEP_ID") or own_env.get("SLURM_STEPID")
    walked = None
    how = options["discovery"]
    if how == "auto":
        walked = sibling_stepd_descendants(job_id, node, own_step)
    if how in ("auto", "walk") and walked is None:
        walked = stepd_descendants(job_id, node, own_step)
    scontrol = find_tool("scontrol", []) if walked is None else None
    if scontrol:
        # No slurmstepd of the job visible here (another PID namespace, hidepid): ask Slurm.
        listing = Task(tool_run([scontrol, "listpids", job_id, node], min(5.0, clock.left())))
    # GPUs and NICs need no ptrace: a task gathers them on the side while scontrol runs and the
    # stacks are sampled.
    run.side = Task(side_work(doc["tools"]["nvidia-smi"], clock, run.side_found))
    if listing is not None:
        pump_until(lambda: listing.done)
        if isinstance(listing.result, Exception):
            raise listing.result
    exclude = set(options["exclude_pids"])
    procs, method = discover(job_id, node, listing and listing.result, exclude, run.errors, walked)
    classify(procs)
    doc["discovery"] = method
    run.procs = procs


ROLE_ORDER = {"rank": 0, "dataloader_worker": 1, "child": 1, "agent": 2, "task": 3}
#: The most processes of a node without ranks kept as its step's tasks (mark_tasks).
MAX_TASKS = 12


def mark_tasks(procs):
    """On a node where no rank and no launcher runs, the processes of the job's steps (not the
    batch script's, not Slurm's own) get the role "task": what the node does instead of running
    its ranks (a wrapper still staging data, pulling a container, installing packages), its
    ranks not yet started. The closest to the step first, at most MAX_TASKS."""
    if any(p["role"] in ("rank", "agent") for p in procs.values()):
        return
    found = [p for p in procs.values()
             if p["role"] is None and not p.get("zombie")
             and str(p.get("step_id") or "") not in ("", "batch", "extern")
             and p["stat"]["comm"] not in ("slurmstepd", "srun")]
    depth = {}
    for p in found:
        seen, pid = 0, p["stat"]["ppid"]
        while pid in procs and seen < 64:
            seen, pid = seen + 1, procs[pid]["stat"]["ppid"]
        depth[p["pid"]] = seen
    for p in sorted(found, key=lambda p: (depth[p["pid"]], p["pid"]))[:MAX_TASKS]:
        p["role"] = "task"


def _script_lines(procs, entries):
    """A shell task's ``script_line``: where in its script it runs the command it waits for
    (a wrapper still staging data before python: collector/shells.py)."""
    tasks = [e for e in entries if e["role"] == "task"]
    if not tasks:
        return
    children = {}  # type: dict
    for p in procs.values():
        children.setdefault(p["stat"]["ppid"], []).append(p["pid"])

    def children_of(pid):
        # the kernel's list (a child the discovery did not keep too), else the walk's
        listed = _read(f"/proc/{pid}/task/{pid}/children")
        if listed is not None:
            return [int(w) for w in listed.split() if w.isdigit()]
        return sorted(children.get(pid, ()))

    for entry in tasks:
        found = shell_line(entry["pid"], entry["cmdline"], children_of)
        if found:
            entry["script_line"] = found


#: The most processes ``via`` lists between a rank and its descendant (a shell that runs a shell).
MAX_VIA = 8


def _via(procs, info):
    """The pids between the rank and its child ``info``, its parent first: the shell that
    ``shell=True`` or os.system runs and the rank waits for (``[]`` for the rank's own child)."""
    out = []  # type: list
    for parent in _ancestors(procs, info["pid"]):
        if parent["pid"] == info["rank_pid"] or len(out) == MAX_VIA:
            break
        out.append(parent["pid"])
    return out


def describe_processes(run):
    """One entry per kept process (doc["processes"]): identity, state, the CPU window's start."""
    procs, page_kb = run.procs, run.page_kb
    mark_tasks(procs)
    kept = [p for p in procs.values() if p["role"] is not None]
    kept.sort(
        key=lambda p: (
            ROLE_ORDER[p["role"]],
            _as_int(p["global_rank"]) is None,
            _as_int(p["global_rank"]) or 0,
            p["pid"],
        )
    )
    entries = []
    unsampled = set()
    for info in kept:
        env = info["env"]
        source = procs[info["rank_pid"]] if info["rank_pid"] else info
        role = info["role"]
        # an agent's SLURM_PROCID numbers nodes, not ranks; a task is no rank (yet)
        identity = role not in ("agent", "task")
        known = rank_identity(source)
        entry = {
            "pid": info["pid"],
            "ppid": info["stat"]["ppid"],
            "role": role,
            "rank_pid": info["rank_pid"],
            "rank": _as_int(source["global_rank"]) if identity else None,
            "local_rank": _as_int(known[1]) if identity else None,
            "world_size": _as_int(known[2]) if identity else None,
            "launcher": info.get("agent_kind") if role == "agent" else _launcher(source, procs),
            "step_id": info["step_id"],
            "cmdline": info["cmdline"],
            "comm": info["stat"]["comm"],
            "state": info["stat"]["state"],
            "wchan": None,
            "num_threads": info["stat"]["num_threads"],
            "rss_kb": info["stat"]["rss_pages"] * page_kb,
            "cpu_percent": None,
            "cpu_window_s": None,
            "env": allowed_env(env),
            "samples": [],
            "strace": None,
            "connections": [],
            "errors": [],
        }
        tracer = read_tracer(info["pid"])  # before our own strace attaches
        if tracer is not None:
            entry["tracer"] = tracer
        run.window_start[info["pid"]] = (
            time.monotonic(),
            info["stat"]["ticks"],
            info["stat"]["starttime"],
        )
        if role in ("child", "task"):  # a copy tool works with little CPU: its I/O counters
            run.child_io[info["pid"]] = _io_counters(f"/proc/{info['pid']}/io")
        if info["rank_pid"]:
            entry["via"] = _via(procs, info)
        if info.get("inferred") and role == "rank":
            entry["errors"].append(info["inferred"])
        entries.append(entry)
        if role != "rank" and not _is_python(info):
            unsampled.add(info["pid"])
            entry["errors"].append("not a Python process: no stack samples")
    run.doc["processes"] = run.entries = entries
    _script_lines(procs, entries)
    run.kept = kept
    run.ranks = [e for e in entries if e["role"] == "rank"]
    run.workers = [
        e
        for e in entries
        if e["role"] in ("dataloader_worker", "child") and e["pid"] not in unsampled
    ]
    if not run.ranks:
        run.errors.append(f"no rank processes of job {run.options['job_id']} found on {run.doc['node']}")
        # A launcher with no ranks yet (torchrun waiting in its rendezvous) is worth one stack.
        run.workers += [e for e in entries if e["role"] == "agent" and e["pid"] not in unsampled]
    run.rank_envs = {info["pid"]: info["env"] for info in kept if info["role"] == "rank"}


def request_flight_recorder(run):
    """Flight Recorder: ask hooked ranks first, so they dump while the stacks are sampled."""
    if not run.options["flight_recorder"]:
        return
    for entry in run.ranks:
        if entry["pid"] not in run.fr_requests:
            run.fr_requests[entry["pid"]] = fr_request(entry["pid"], run.rank_envs[entry["pid"]])


def read_sockets(run):
    """The TCP sockets of every process: mp.spawn's children become ranks only after round one."""
    try:
        run.sockets["ids"], run.sockets["endpoints"] = {}, {}
        run.sockets["by_pid"], run.doc["sockets_read_with"] = tcp_sockets(
            [e["pid"] for e in run.entries], run.sockets["ids"], run.sockets["endpoints"])
    except Exception as exc:  # noqa: BLE001 - sockets must not cost the stacks
        run.sockets["by_pid"] = {}
        run.errors.append(f"sockets not read: collector bug: {exc!r}")


def sample_stacks(run):
    """Stack samples: K rounds ``interval`` apart; workers only in the first round.

    The ranks' TCP sockets are read while the first round's dumps run. strace and a blocking
    py-spy cannot trace one process at once: strace traces the ranks from the start, and the
    rounds read them with --nonblocking meanwhile; the first waits (ATTACH_WAIT_S at most) until
    strace holds every thread, as attaching wakes them all and only a sample read after it can
    be kept by the next round (see sample_round). bench/README.md measures the choices of
    "strace_overlap": "start" (default), "first" (strace from the end of the first round, which
    is read with the suspend), "off" (strace after sampling). With --native every round needs
    the suspend, so strace comes after them.
    """
    options, clock, errors = run.options, run.clock, run.errors
    samples, strace_s, native = options["samples"], options["strace_s"], options["native"]
    pyspy, strace = run.doc["tools"]["py-spy"], run.doc["tools"]["strace"]
    overlap = options["strace_overlap"] if strace_s > 0 and not native else "off"
    if options["align_s"] > 0:  # our processes are found: the controller's go may come
        _write_line(READY_LINE.format(run.doc["node"]))
    if not pyspy and samples and run.ranks:
        errors.append("py-spy not found: no stacks (install py-spy or pass its path)")
    elif run.ranks or run.workers:
        if options["align_s"] > 0:
            wait_for_the_other_nodes(run)
        read_gloo_groups(run, traced=strace_s > 0 and bool(strace), rounds=samples)
        first_round_at = time.monotonic()
        round_cost = 0.3
        done = 0
        for k in range(samples):
            due = first_round_at + k * options["interval"]
            if due + round_cost > clock.deadline - FINISH_RESERVE_S:
                errors.append(
                    f"skipped samples {k + 1}-{samples} of {samples}: they would end after "
                    f"deadline_s {clock.deadline - clock.t0:.1f}"
                )
                break
            pump_until(lambda: False, due)  # the side task's and strace's tools run meanwhile
            if k == 0 and overlap == "start" and run.ranks:
                run.tracing = start_strace(run.ranks, strace, strace_s, clock, errors,
                                           run.window_end)
                if run.tracing[1]:
                    wait_attached(run.tracing[0], run.tracing[1], time.monotonic() + ATTACH_WAIT_S)
            began = time.monotonic()
            sample_round(run, first=k == 0)
            round_cost = max(round_cost * 0.5, time.monotonic() - began)
            done += 1
            if k == 0 and run.workers and adopt_spawned_ranks(
                run.entries, pyspy, clock, options["concurrency"]
            ):
                # mp.spawn: the "rank" was the launching script, its "workers" the ranks
                run.ranks = [e for e in run.entries if e["role"] == "rank"]
                run.rank_envs = {e["pid"]: run.procs[e["pid"]]["env"] for e in run.ranks}
                request_flight_recorder(run)
                if run.tracing is not None:  # strace from the start traced the script
                    traced = {e["pid"] for e in run.tracing[0]}
                    fresh = [e for e in run.ranks if e["pid"] not in traced]
                    if fresh:
                        run.tracing = join_tracing(
                            run.tracing,
                            start_strace(fresh, strace, strace_s, clock, errors, run.window_end))
            if k == 0 and overlap == "first" and run.ranks and run.tracing is None:
                run.tracing = start_strace(run.ranks, strace, strace_s, clock, errors,
                                           run.window_end)
        ranks = run.ranks
        if done and ranks and all(s["threads"] is None for e in ranks for s in e["samples"]):
            errors.append("py-spy produced no stack for any rank")
    if "by_pid" not in run.sockets:
        read_sockets(run)
    if run.tracing is None and strace_s > 0 and run.ranks:
        run.tracing = start_strace(run.ranks, strace, strace_s, clock, errors, run.window_end)


def read_gloo_groups(run, traced, rounds):
    """Each rank's gloo groups' workers (gloo_workers) and its main thread (_watched), before
    strace's attach and the first dump, which wake every thread: whether they run during
    strace's window is read at its end (window_end); without strace, a look's ~0.1 s from its dump to its end is too short for
    workers asleep then to mean anything, so how long they had been idle is read now too
    (idle_ms_of). Not at all without strace and with more than one round: the later rounds'
    dumps (blocking) wake every thread again, so no group would be seen asleep."""
    if not traced and rounds > 1:
        return
    for entry in run.ranks:
        run.gloo_workers[entry["pid"]] = gloo_workers(entry["pid"]) or []
    if not traced:
        run.gloo_idle = idle_ms_of({e["pid"]: _watched(run, e["pid"]) for e in run.ranks})


def _watched(run, pid):
    """The threads of ``pid`` whose sleep is read (read_gloo_groups): each gloo group's workers,
    then the main thread (a send or receive waits on the calling thread: gloo runs it there)."""
    return run.gloo_workers[pid] + [[pid]]


def _split_watched(values):
    """(the gloo groups' values, the main thread's) of one list read for _watched's threads."""
    return values[:-1], values[-1]


def wait_for_the_other_nodes(run):
    """Wait for the controller's go: it comes once every node's collector said it is ready
    (sample_stacks), so that every node's look covers the same seconds (and the early nodes'
    first dumps do not take the CPU that the later nodes need to start and find their ranks,
    where nodes share a host's cores). At most until ``align_s`` after our own start; a
    transport that sends nothing closes our stdin."""
    clock, status = run.clock, run.status
    _enter_phase(status, "waiting for the other nodes")
    began = time.monotonic()
    until = min(clock.t0 + run.options["align_s"], clock.deadline - FINISH_RESERVE_S - 1.0)
    run.doc["aligned"] = {"by": wait_for_go(until), "waited_s": round(time.monotonic() - began, 3)}
    _enter_phase(status, "py-spy sampling")


def sample_round(run, first, targets=None):
    """One round of ``py-spy dump``: the ranks (and in the first round the workers) in parallel."""
    if targets is None:
        targets = run.ranks + (run.workers if first else [])
    for entry in targets:
        if entry["role"] == "rank":
            run.round_wchan[entry["pid"]] = _wchan(entry["pid"])
    traced = set()
    if run.tracing and run.tracing[1]:
        traced = {e["pid"] for e, t in zip(run.tracing[0], run.tracing[1]) if not t.done}
    pyspy, native, clock = run.doc["tools"]["py-spy"], run.options["native"], run.clock
    # A process none of whose sampled threads ran since its last dump keeps that sample: py-spy
    # would read the same stacks (see unchanged_sample), at ~15 ms of CPU a torch rank. The
    # threads' schedule is read once a round, before any dump of it starts: for a process
    # dumped now it is the one the next round compares with (read earlier than its dump, so
    # any run in between shows as a change then).
    repeated = {}
    for entry in targets:
        pid, samples = entry["pid"], entry["samples"]
        now = read_schedule(pid)
        previous = samples[-1] if samples and not first else None
        if previous and unchanged_sample(previous, run.schedules.get(pid), now):
            again = reuse_sample(pid, previous, previous.get("same_as", len(samples) - 1), clock)
            if again is not None:
                repeated[pid] = again
                continue
        run.schedules[pid] = now
    dumped = [e for e in targets if e["pid"] not in repeated]
    results = iter(run_tasks(
        # the first round also reads the ranks' process groups (--locals)
        (dump_stack(pyspy, e["pid"], native, clock, e["pid"] in traced,
                    first and e["role"] == "rank") for e in dumped),
        run.options["concurrency"],
        (lambda: read_sockets(run)) if first else None,
    ))
    for entry in targets:
        result = repeated[entry["pid"]] if entry["pid"] in repeated else next(results)
        if isinstance(result, Exception):
            result = {
                "t": round(time.time() - clock.started, 3),
                "threads": None,
                "error": f"collector bug: {result!r}",
            }
        entry["samples"].append(result)
        if entry["pid"] in run.gloo_workers and first:  # after strace's attach and the dump,
            # which wake every thread
            run.gloo_schedule[entry["pid"]] = gloo_schedule(entry["pid"],
                                                            _watched(run, entry["pid"]))
        if entry["role"] == "child" and _in_dataloader_loop(result["threads"]):
            entry["role"] = "dataloader_worker"  # a fork: same cmdline as its rank


def read_process_state(run):
    """Process state and CPU over the sampling window."""
    tick = float(os.sysconf("SC_CLK_TCK"))
    for entry in run.entries:
        pid = entry["pid"]
        stat = _stat_now(run, pid)
        begun, ticks, starttime = run.window_start[pid]
        if stat is None or stat["starttime"] != starttime:
            entry["errors"].append("process exited during collection")
            continue
        window = time.monotonic() - begun
        entry["state"] = stat["state"]
        entry["num_threads"] = stat["num_threads"]
        entry["rss_kb"] = stat["rss_pages"] * run.page_kb
        entry["cpu_window_s"] = round(window, 3)
        if window > 0.05:
            entry["cpu_percent"] = round((stat["ticks"] - ticks) / tick / window * 100.0, 1)
        entry["wchan"] = _wchan(pid)
    reread_woken(run, run.entries)
    sample_again(run)
    try:
        read_blocked_calls(run)
    except Exception as exc:  # noqa: BLE001 - an extra reading: it must not cost the document
        run.errors.append(f"system calls not read: collector bug: {exc!r}")
    try:
        # the thread's read (started with the collection: done by now, unless the node's
        # grace periods are slow; 25 ms seen)
        waited = time.monotonic() + 0.5
        while not run.locks_text and time.monotonic() < waited:
            time.sleep(0.002)
        text = run.locks_text[0] if run.locks_text else None
        locks = file_locks([e["pid"] for e in run.ranks], text) if text is not None else {}
    except Exception as exc:  # noqa: BLE001 - an extra reading: it must not cost the document
        run.errors.append(f"file locks not read: collector bug: {exc!r}")
        return
    for entry in run.ranks:
        if entry["pid"] in locks:
            entry["file_locks"] = locks[entry["pid"]]


#: Kernel waits of a process on a mount's answer (FUSE, NFS's RPC): a node where one shows reads
#: none of the job's files.
_MOUNT_WAITS = ("request_wait_answer", "rpc_wait", "nfs_")


def read_called_targets(run):
    """A rank's ``called_target``: the line of its own code that passed a call as a thread's
    target, its main thread inside that call in its last sample (collector/sources.py)."""
    if any(e.get("state") == "D" or any(w in (e.get("wchan") or "") for w in _MOUNT_WAITS)
           for e in run.entries):
        return  # a mount that does not answer would hold the collector in its stat of a file
    cache = {}  # type: dict
    try:
        for entry in run.ranks:
            sample = next((x for x in reversed(entry["samples"]) if x.get("threads")), None)
            found = sample and called_target(entry["pid"], sample["threads"], cache)
            if found:
                entry["called_target"] = found
    except Exception as exc:  # noqa: BLE001 - an extra reading: it must not cost the document
        run.errors.append(f"thread targets not read: collector bug: {exc!r}")


# read_stat, past our own strace's syscall stops while it traces the ranks.
def _stat_now(run, pid):
    return _untraced_stat(pid) if run.tracing is not None else read_stat(pid)


# The kernel function a process sleeps in, None while it runs (or is gone).
def _wchan(pid):
    wchan = _read(f"/proc/{pid}/wchan", one_show=True)
    return wchan.strip() if wchan and wchan.strip() not in ("", "0") else None


def _wait_unread(wchan):
    """No wait channel, or ``ptrace_stop`` read of a process not in a tracing stop: our strace
    stopping it as it attached or left (retry_loop_store_waiter: a sleeper of three read so,
    its sleep unnamed, and the rule that sees the three asleep together did not hold)."""
    return wchan is None or wchan == "ptrace_stop"


def reread_woken(run, entries):
    """Read again, for up to WOKEN_REREAD_S, the state of the processes read runnable with no wait
    channel though they used (almost) no CPU over the window, until the kernel names their wait.
    Such a reading caught an instant: a sleep that ended (a data loader's sleep as the look ends:
    all_waiting called on a healthy job), a blocked call restarted by strace's attach (a FIFO's
    open read as running). A process that stays runnable (starved on a crowded node) keeps its
    reading; one that works is not read again (its CPU says so). One read asleep with no wait
    channel was read as it woke or went to sleep between the two readings (store_poll --samples 1:
    rank 1 in its store poll, its wait unread, the straggler with rank 2): read again too, as is
    one read asleep in ``ptrace_stop`` (our strace's stop, _wait_unread): one still so after
    WOKEN_REREAD_S keeps its reading, which the analysis reads as no wait channel.
    """
    woken = [e for e in entries
             if _wait_unread(e.get("wchan")) and (
                 e.get("state") in ("S", "D")
                 or (e.get("state") == "R" and e.get("cpu_percent") is not None
                     and e["cpu_percent"] < IDLE_CPU_PERCENT))]
    if not woken:
        return
    until = min(time.monotonic() + WOKEN_REREAD_S, run.clock.deadline - FINISH_RESERVE_S)
    while woken and time.monotonic() < until:
        time.sleep(0.002)
        left = []
        for entry in woken:
            pid = entry["pid"]
            wchan = _wchan(pid)
            stat = _stat_now(run, pid)
            if stat is None or stat["starttime"] != run.window_start[pid][2]:
                continue
            if not _wait_unread(wchan) and stat["state"] != "R":
                entry["state"], entry["wchan"] = stat["state"], wchan
            else:
                left.append(entry)
        woken = left


def sample_again(run):
    """One more sample of the ranks whose wait channel changed between their last round and the
    reading of their state after it: the kernel's wait read then is not the one the last stack
    was taken in (healthy_slow's ranks, read asleep in both samples, then in the all_reduce's
    futex at the state's reading as their 1-s sleep ended: "blocked on a lock" at the sleep's
    line, all_waiting on a healthy job). The sample taken now goes with the state read again
    after it; a rank that keeps its wait (any hang) is not read again. Only a wait changed to
    another counts: a reading of none (running, or our strace attaching or leaving) or of
    ptrace_stop (our strace's stop at a syscall) is no change (strace leaving as the last round
    began: extra dumps of ranks hung in their all_reduce).
    """
    moved = []
    for e in run.ranks:
        before, now = run.round_wchan.get(e["pid"]), e.get("wchan")
        if before and now and before != now and "ptrace" not in before + now and e["samples"]:
            moved.append(e)
    if moved and time.monotonic() + 0.3 < run.clock.deadline - FINISH_RESERVE_S:
        sample_round(run, first=False, targets=moved)
        for entry in moved:
            entry["samples"][-1]["again"] = True
            stat = _stat_now(run, entry["pid"])
            if stat is not None and stat["starttime"] == run.window_start[entry["pid"]][2]:
                entry["state"], entry["wchan"] = stat["state"], _wchan(entry["pid"])
        reread_woken(run, moved)


def read_blocked_calls(run):
    """Each rank's threads sitting in a system call on a descriptor, a socket named by its
    connection's endpoints when round one's socket reading saw it."""
    endpoints = run.sockets.get("endpoints") or {}
    for entry in run.ranks:
        calls = blocked_calls(entry["pid"])
        for call in calls:
            ends = endpoints.get(socket_inode(call["target"]))
            if ends is not None:
                call["local"], call["remote"] = ends
        if calls:
            entry["blocked_calls"] = calls


def finish_side_work(run):
    """GPUs and NICs from the side task, or what says they were not collected."""
    side = run.side
    pump_until(lambda: side is None or side.done, run.clock.deadline - FINISH_RESERVE_S)
    if side is None or not side.done:
        run.errors.append("GPU/NIC collection did not finish before the deadline")
    run.doc["gpu"] = run.side_found.get("gpu") or {
        "status": "error",
        "message": "nvidia-smi did not finish before the deadline",
        "query_gpu": None,
        "compute_apps": None,
        "qx": None,
        "xid_lines": [],
    }
    run.doc["nics"] = run.side_found.get("nics") or {
        "interfaces": [],
        "ib_ports": [],
        "message": "not collected before the deadline",
    }


# Data a connection carried up to this long before the strace window's end still counts as in
# it: the connections are read just after strace stops.
RECENT_SLACK_MS = 500
MAX_RECENT = 64


def read_recent_traffic(run):
    """Which connections of each rank strace traced carried data during its window: the rank's
    established sockets read again (through copies of their descriptors, else by netlink lookups) with their tcp_info once
    strace has stopped. strace counts a rank's sends and receives, not which connection they
    were on: a store's host serving its pollers and a rank whose collectives complete look the
    same to it (docs/node-document.md, ``recent_traffic``)."""
    ids = run.sockets.get("ids") or {}
    traced = [e for e in run.ranks
              if (e.get("strace") or {}).get("status") == "ok" and e["pid"] in ids]
    found = _activity_now(run, traced, "recent traffic") if traced else None
    if found is None:
        return
    for entry in traced:
        within = int(entry["strace"]["window_s"] * 1000) + RECENT_SLACK_MS
        mine = found[entry["pid"]]
        traffic = {"within_ms": within, "checked": len(mine), "active": _active(mine, within)}
        if mine:  # how long the rank has moved nothing on any connection: how long it waits
            traffic["quiet_ms"] = min(min(times[:2]) for times, _ in mine)
        if run.gloo_ran.get(entry["pid"]):  # read at the window's end (window_end)
            groups, traffic["main_ran"] = _split_watched(run.gloo_ran[entry["pid"]])
            if groups:
                traffic["gloo_ran"] = groups
        # sent and never acknowledged, retransmitted on timeout: the path loses what it carries
        stalled = [{"local": local, "remote": remote, "unacked": unacked,
                    "retransmits": retransmits, "backoff": backoff, "last_ack_ms": last_ack}
                   for (_, _, unacked, retransmits, backoff, last_ack), (local, remote) in mine
                   if unacked and retransmits]
        if stalled:
            traffic["stalled"] = stalled[:MAX_RECENT]
        entry["recent_traffic"] = traffic


#: Without strace, the connections that carried data this long before the look's end (ms): a
#: step's collectives move data every few hundred milliseconds, a hung rank's none since the hang.
LOOK_RECENT_MS = 1000


def read_look_traffic(run):
    """Without strace (``--strace 0``): which established connections of each rank carried data
    in the last LOOK_RECENT_MS, and how long each rank has moved nothing (tcp_info's times, the
    sockets read in round one read again): a one-sample look's sign that collectives complete,
    the way strace's window is for a longer one (``read_at`` "look")."""
    ids = run.sockets.get("ids") or {}
    ranks = [e for e in run.ranks if ids.get(e["pid"])]
    found = _activity_now(run, ranks, "recent traffic") if ranks else None
    if found is None:
        return
    for entry in ranks:
        mine = found[entry["pid"]]
        traffic = {"within_ms": LOOK_RECENT_MS, "checked": len(mine), "read_at": "look",
                   "active": _active(mine, LOOK_RECENT_MS)}
        if mine:
            traffic["quiet_ms"] = min(min(times[:2]) for times, _ in mine)
        before = run.gloo_schedule.get(entry["pid"])
        if before and run.gloo_idle.get(entry["pid"]):  # the threads since the dump, and before
            groups, traffic["main_ran"] = _split_watched(gloo_groups_ran(entry["pid"], before))
            idle, traffic["main_idle_ms"] = _split_watched(run.gloo_idle[entry["pid"]])
            if groups:
                traffic["gloo_ran"], traffic["gloo_idle_ms"] = groups, idle
        entry["recent_traffic"] = traffic


#: How lately a rank's child must have sent or received data to be moving it (ms): a copy tool
#: uploading at a throttled rate sends every few hundred milliseconds.
CHILD_RECENT_MS = 2500


def read_children_traffic(run):
    """Which established connections of the ranks' children (role "child": a copy tool, an
    upload or download command) carried data in the last CHILD_RECENT_MS: a rank waiting for
    a child that moves data works through it (`aws s3 cp` of a checkpoint while the others
    wait in a barrier). The sockets read in round one; no strace needed (tcp_info's times)."""
    ids = run.sockets.get("ids") or {}
    children = [e for e in run.entries if e["role"] == "child" and ids.get(e["pid"])]
    found = _activity_now(run, children, "children's traffic") if children else None
    if found is None:
        return
    for entry in children:
        mine = found[entry["pid"]]
        entry["recent_traffic"] = {"within_ms": CHILD_RECENT_MS, "checked": len(mine),
                                   "active": _active(mine, CHILD_RECENT_MS)}


def _activity_now(run, entries, what):
    """{pid: [(tcp_info times, [local, remote])]}: the established connections round one found
    for each of ``entries``, read again now (through copies of their descriptors, else by
    netlink lookups); None when the reading failed, said in the document's errors."""
    ids = run.sockets.get("ids") or {}
    try:
        activity = recent_activity({key for e in entries for key, _, _ in ids[e["pid"]]})
    except Exception as exc:  # noqa: BLE001 - an extra reading: it must not cost the document
        run.errors.append(f"{what} not read: {exc}")
        return None
    return {e["pid"]: [(activity[key], ends) for key, *ends in ids[e["pid"]] if key in activity]
            for e in entries}


def _active(mine, within):
    """The connections of ``mine`` ([(tcp_info times, [local, remote])]) that sent or received
    data in the last ``within`` ms, newest first, at most MAX_RECENT."""
    recent = sorted((min(times[:2]), ends, times) for times, ends in mine
                    if min(times[:2]) <= within)
    return [{"local": local, "remote": remote, "last_sent_ms": times[0],
             "last_received_ms": times[1]} for _, (local, remote), times in recent[:MAX_RECENT]]


#: The shortest window a child's I/O rate is given for (s): a throttled copy writes a block every
#: few hundred milliseconds, and a look of one sample without strace lasts less.
CHILD_IO_WINDOW_S = 0.5


def watch_tasks(run):
    """On a node with no rank, only its step's tasks, nothing else gives the look any length:
    wait out CHILD_IO_WINDOW_S from their discovery, so their CPU and file I/O are read over a
    window (a wrapper's staging that copies is told from one that waits). Costs that much only
    on such a node."""
    if run.ranks or not any(e["role"] == "task" for e in run.entries):
        return
    begun = min(run.window_start[e["pid"]][0] for e in run.entries if e["role"] == "task")
    wait = min(CHILD_IO_WINDOW_S + 0.05 - (time.monotonic() - begun), run.clock.left() - 1.0)
    if wait > 0:
        time.sleep(wait)


def read_children_io(run):
    """Each child's and task's characters read and written per second (files and pipes, not
    sockets: /proc/PID/io) from its discovery to now, after strace's window when it ran: a copy
    tool writing a checkpoint works with little CPU (rank0_copy_tool_barrier), and so does a
    wrapper's staging copy before its node's ranks start."""
    now = time.monotonic()
    for entry in run.entries:
        first = run.child_io.get(entry["pid"])
        window = now - run.window_start[entry["pid"]][0]
        if entry["role"] not in ("child", "task") or not first or window < CHILD_IO_WINDOW_S:
            continue
        last = _io_counters(f"/proc/{entry['pid']}/io")
        if last:
            entry["io_rate"] = int((last[0] + last[1] - first[0] - first[1]) / window)


def attach_connections(run):
    """Each rank's and agent's TCP connections, named by the interface of their local address."""
    addr_to_if = {}  # type: dict
    for item in run.doc["nics"].get("interfaces") or ():
        for cidr in item.get("addresses") or ():
            addr_to_if.setdefault(cidr.split("/")[0], item["name"])
    by_pid = run.sockets["by_pid"]
    for entry in run.entries:
        if entry["role"] in ("rank", "agent") and entry["pid"] in by_pid:
            found = by_pid[entry["pid"]]
            if found is None:
                entry["errors"].append("cannot read /proc/{}/fd".format(entry["pid"]))
            else:
                entry["connections"] = connection_list(found, addr_to_if)


def main(argv):
    clock = Clock(ARGS_ERROR_BUDGET_S)
    pid = os.getpid()
    args, options, problem = None, None, None
    try:
        args = loads(argv[1]) if len(argv) > 1 else None
        options = read_options(args)
    except ArgsError as exc:
        problem = str(exc)
    except ValueError as exc:
        problem = f"arguments are not JSON: {exc}"
    if options is not None:
        clock.deadline = clock.t0 + options["deadline_s"]
    # The node's name even from unusable arguments: the controller files the document under it.
    named = args.get("node") if isinstance(args, dict) else None
    node = str(
        (named if isinstance(named, str) else None)
        or _environ().get("SLURMD_NODENAME")
        or os.uname().nodename.split(".")[0]
    )
    node = "_".join(node.split()) or "unknown"
    _write_line(f"@SDG1-HELLO {node} {pid}\n")

    doc = {  # type: dict
        "format": FORMAT,
        "node": node,
        "hostname": os.uname().nodename,
        "python": "{}.{}.{}".format(*sys.version_info[:3]),
        # Yama's ptrace policy decides whether py-spy and strace may attach at all.
        "ptrace_scope": (_read("/proc/sys/kernel/yama/ptrace_scope") or "").strip() or None,
        "collector_version": COLLECTOR_VERSION,
        "started": clock.started,
        "duration_s": None,
        "cpu_s": None,
        "discovery": None,
        "tools": {"py-spy": None, "strace": None, "nvidia-smi": None},
        "errors": [problem] if problem else [],
        "processes": [],
        "gpu": None,
        "nics": None,
    }
    emitter = Emitter(node)
    status = {"phase": "start", "since": time.monotonic()}

    def emit_partial(reason):
        """Signal handler work: end the tools, write what exists, exit."""
        if not emitter.claim():
            if emitter.done:
                os._exit(0)
            return  # the main code is writing the document right now: let it finish
        doc["errors"].append("{} during {}; document is partial".format(reason, status["phase"]))
        doc["duration_s"] = round(clock.elapsed(), 3)
        _kill_live_tools()
        emitter.write(doc)
        os._exit(0)

    _signal.signal(_signal.SIGALRM, lambda signum, frame: emit_partial("deadline reached"))
    for sig in (_signal.SIGTERM, _signal.SIGHUP, _signal.SIGUSR1):
        _signal.signal(sig, lambda signum, frame: emit_partial(f"signal {signum} received"))
    # The watchdog: SIGALRM shortly before the deadline if the document is not out by then.
    margin = clock.deadline - WATCHDOG_MARGIN_S - time.monotonic()
    _signal.setitimer(_signal.ITIMER_REAL, max(margin, 0.001))
    # A signal handler only runs when the main thread returns to Python: a read of
    # /proc/PID/environ of a process stuck in the kernel (dead NFS mount, "ps hangs") or a
    # stuck NIC driver can hold it past the deadline. A backup thread (builtin _thread: no
    # import cost) writes the partial document then.
    import _thread

    def backup_watchdog():
        time.sleep(max(margin, 0.001) + WATCHDOG_MARGIN_S / 2)
        emit_partial("deadline reached (collector blocked in the kernel)")

    _thread.start_new_thread(backup_watchdog, ())

    try:
        if options is not None:
            collect(options, clock, doc, status)
    except Exception as exc:  # noqa: BLE001 - the document is the only way out: report, never crash
        import traceback

        doc["errors"].append(
            "collector failed in {}: {}".format(
                status["phase"], "".join(traceback.format_exception_only(type(exc), exc)).strip()
            )
        )
    _end_live_tools(0.2)  # normally none; a late nvidia-smi, or one left by a failure
    doc["duration_s"] = round(clock.elapsed(), 3)
    # Since this process started (exec and interpreter start-up included); not the tools'.
    doc["cpu_s"] = round(time.process_time(), 4)
    if emitter.claim():
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        emitter.write(doc)
    return 0

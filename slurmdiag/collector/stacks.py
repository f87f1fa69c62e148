"""py-spy: stack samples, the identities of mp.spawn's ranks, and per-thread CPU usage."""

import posix as os
import time

from .discovery import _as_int
from .framing import loads
from .procfs import _read, read_stat, task_statuses
from .tools import FINISH_RESERVE_S, _one_line, run_tasks, tool_run


def slim_threads(threads):
    """py-spy's JSON threads without locals and duplicate names."""
    out = []
    for thread in threads:
        frames = []
        for frame in thread.get("frames") or ():
            frames.append(
                {
                    "name": frame.get("name"),
                    "filename": frame.get("filename"),
                    "line": frame.get("line"),
                    "module": frame.get("module"),
                }
            )
        out.append(
            {
                "thread_id": thread.get("thread_id"),
                "os_thread_id": thread.get("os_thread_id"),
                "thread_name": thread.get("thread_name"),
                "active": thread.get("active"),
                "owns_gil": thread.get("owns_gil"),
                "frames": frames,
            }
        )
    return out


def _nspid(status):
    """The ids of a status text's NSpid line: this /proc's first, the innermost last."""
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            return [int(x) for x in line.split()[1:] if x.isdigit()]
    return []


def node_tids(pid):
    """{thread id as the process's own PID namespace numbers it: as this node's /proc does} for a
    process in another PID namespace (a container runtime's: podman, apptainer --containall),
    else None. py-spy gives each thread's id as the process sees it (1 for a container's first
    process); the collector's per-thread readings and the main thread's rule (its id is the
    pid) use the node's."""
    if len(_nspid(_read(f"/proc/{pid}/status", one_show=True) or "")) < 2:
        return None
    found = {}
    for _, status in task_statuses(pid) or ():
        ids = _nspid(status)
        if len(ids) >= 2:
            found[ids[-1]] = ids[0]
    return found or None


def to_node_tids(threads, pid):
    """``threads`` (py-spy's JSON) with their os_thread_id as the node numbers them."""
    mapping = node_tids(pid)
    if mapping:
        for thread in threads:
            ns_tid = thread.get("os_thread_id")
            thread["os_thread_id"] = mapping.get(ns_tid, ns_tid)
    return threads


def _in_dataloader_loop(threads):
    for thread in threads or ():
        for frame in thread["frames"]:
            if frame["name"] == "_worker_loop" and "utils/data" in (frame["filename"] or ""):
                return True
    return False


def _spawn_wrap_frame(threads):
    """(frames, index) of torch.multiprocessing's ``_wrap`` in a stack, or None.

    ``torch.multiprocessing.spawn``/``start_processes`` runs each rank as ``_wrap(fn, i, ...)``
    in a child of the launching script: such a child is a rank, not a worker of its parent.
    """
    for thread in threads or ():
        frames = thread.get("frames") or ()
        for index, frame in enumerate(frames):
            if frame.get("name") == "_wrap" and (frame.get("filename") or "").endswith(
                "torch/multiprocessing/spawn.py"
            ):
                return frames, index
    return None


def _frames_of(threads):
    for thread in threads or ():
        yield from thread.get("frames") or ()


def _distributed_frames(threads):
    """A torch.distributed frame in any thread of a stack."""
    return any("/torch/distributed/" in (f.get("filename") or "") for f in _frames_of(threads))


def _bare(name):
    """A function's name without its class (py-spy 0.4 says ``BaseProcess.join``)."""
    return (name or "").rsplit(".", 1)[-1]


def _joins_children(threads):
    """A stack that waits for its multiprocessing children: ``Process.join`` (the loop of
    PyTorch's "Writing Distributed Applications" tutorial), or multiprocessing's wait on their
    sentinels."""
    for frame in _frames_of(threads):
        name, file = _bare(frame.get("name")), frame.get("filename") or ""
        if (name == "join" and file.endswith("multiprocessing/process.py")) or (
                name == "wait" and file.endswith("multiprocessing/connection.py")):
            return True
    return False


def _process_target_frame(threads):
    """The frame that multiprocessing's ``BaseProcess.run`` called (the Process's target), or
    None: ``Process(target=init_process, args=(rank, size, fn))``."""
    for thread in threads or ():
        frames = thread.get("frames") or ()
        for index, frame in enumerate(frames):
            if index and _bare(frame.get("name")) == "run" and (
                    frame.get("filename") or "").endswith("multiprocessing/process.py"):
                return frames[index - 1]
    return None


def _process_ranks(entries, by_pid):
    """Multiprocessing children (spawned, forked, or forked by a forkserver) that run
    torch.distributed while the process that started them runs none and waits for them in
    ``Process.join``: the ranks of PyTorch's "Writing Distributed Applications" tutorial, each
    a ``multiprocessing.Process`` with its rank as the target's argument. A rank's helper
    process that does distributed work of its own (an asynchronous checkpoint's) is not: its
    rank is in a collective, or at its own work, not joining it."""
    found = []
    for entry in entries:
        parent = by_pid.get(entry["rank_pid"] or -1)
        if (entry["role"] in ("dataloader_worker", "child") and entry["samples"]
                and parent is not None and parent["samples"]
                and _distributed_frames(entry["samples"][0]["threads"])
                and not _distributed_frames(parent["samples"][0]["threads"])
                and _joins_children(parent["samples"][0]["threads"])
                and _spawn_wrap_frame(entry["samples"][0]["threads"]) is None):
            found.append(entry)
    return found


IDENTITY_LOCALS = {
    "rank": ("rank", "global_rank"),
    "world_size": ("world_size", "world"),
}


def _local(frame, names):
    for item in frame.get("locals") or ():
        if item.get("name") in names:
            value = _as_int(item.get("repr"))
            if value is not None:
                return value
    return None


def spawn_identity(threads):
    """{"local_rank", "rank", "world_size"} read from py-spy --locals of a spawned rank.

    ``i`` of ``_wrap`` is the process index; the rank and world size are what the user's
    function (the frame ``_wrap`` called) named ``rank``/``global_rank`` and
    ``world_size``/``world``, when it did; a missing one is None. A rank that torch's elastic
    agent started with a function entrypoint (``elastic_launch``: torchx, Hydra's launchers,
    launch scripts) runs below elastic's own ``_wrap``, whose worker environment (``env_``)
    says the rank the rendezvous gave it: that comes first. A plain
    ``multiprocessing.Process`` rank has no index: its target's locals only.
    """
    found = _spawn_wrap_frame(threads)
    out = {"local_rank": None, "rank": None, "world_size": None}
    if found is None:
        target = _process_target_frame(threads)
        if target is not None:
            for key, names in IDENTITY_LOCALS.items():
                out[key] = _local(target, names)
        return out
    frames, index = found
    out["local_rank"] = _local(frames[index], ("i",))
    if index > 0:
        for key, names in IDENTITY_LOCALS.items():
            out[key] = _local(frames[index - 1], names)
    elastic = elastic_worker_env(frames[:index])
    for key, value in elastic.items():
        if value is not None:
            out[key] = value
    return out


#: torch elastic's worker wrapper: ``_wrap(local_rank, fn, args, envs, ...)`` sets the worker's
#: environment (its local ``env_``) in os.environ, after the process started
ELASTIC_WRAP_FILE = "torch/distributed/elastic/multiprocessing/api.py"


def _is_elastic_wrap(frame):
    return frame.get("name") == "_wrap" and (frame.get("filename") or "").endswith(
        ELASTIC_WRAP_FILE)


def _elastic_wrapped(threads):
    """Does a stack run below torch elastic's ``_wrap`` (a worker of elastic's agent)?"""
    return any(_is_elastic_wrap(frame) for frame in _frames_of(threads))


def elastic_worker_env(frames):
    """{"rank", "world_size"} from the ``env_`` local of elastic's ``_wrap`` among ``frames``
    (None for each it does not show): py-spy cuts a dict's repr at 128 characters, RANK is its
    first key, WORLD_SIZE the sixth and often cut."""
    out = {"rank": None, "world_size": None}
    for frame in frames:
        if _is_elastic_wrap(frame):
            for item in frame.get("locals") or ():
                if item.get("name") == "env_":
                    text = item.get("repr") or ""
                    out["rank"] = _repr_item(text, "RANK")
                    out["world_size"] = _repr_item(text, "WORLD_SIZE")
            break
    return out


def _repr_item(text, key):
    """The integer value of ``key`` in py-spy's repr of a dict of strings
    (``{"RANK": "3", "GROUP_RANK": "1", ...}``), else None; a key that only ends the same
    (GROUP_RANK, LOCAL_WORLD_SIZE) is another key."""
    for lead in ("{", ", "):
        marker = lead + '"' + key + '": "'
        at = text.find(marker)
        if at == 0 or (at > 0 and lead == ", "):
            digits = text[at + len(marker):].split('"', 1)[0]
            return int(digits) if digits.isdigit() else None
    return None


def identity_dump(pyspy, pid, clock):
    """Task: one ``py-spy dump --locals`` of ``pid``: its raw threads, or None."""
    timeout = min(10.0, clock.left() - FINISH_RESERVE_S)
    if timeout < 0.2:
        return None
    argv = [pyspy, "dump", "--json", "--locals", "--pid", str(pid)]
    rc, out, _err, _note = yield from tool_run(argv, timeout)
    if rc != 0:
        return None
    try:
        return loads(out)
    except ValueError:
        return None


def adopt_spawned_ranks(entries, pyspy, clock, concurrency):
    """Children run by torch.multiprocessing.spawn become ranks, their parent an agent.

    Called after the first round of samples, which shows ``_wrap`` in such a child's stack.
    Their identity comes from one ``py-spy dump --locals`` each (see spawn_identity). When the
    user's function names no rank, it is ``parent's rank x nprocs + i``, the usual formula.
    """
    by_pid = {e["pid"]: e for e in entries}
    spawned = [
        e
        for e in entries
        if e["role"] in ("dataloader_worker", "child")
        and e["samples"]
        and _spawn_wrap_frame(e["samples"][0]["threads"]) is not None
    ] + _process_ranks(entries, by_pid)
    if not spawned:
        return []
    identities = run_tasks((identity_dump(pyspy, e["pid"], clock) for e in spawned), concurrency)
    parents = {}  # type: dict
    for entry, threads in zip(spawned, identities):
        identity = spawn_identity(threads if isinstance(threads, list) else None)
        parents.setdefault(entry["rank_pid"], []).append(entry)
        # torch elastic's agent inside the launching script (elastic_launch), or mp.spawn
        launcher = "elastic" if _elastic_wrapped(entry["samples"][0]["threads"]) else "mp.spawn"
        entry["role"], entry["rank_pid"], entry["launcher"] = "rank", None, launcher
        entry["local_rank"] = identity["local_rank"]
        entry["rank"], entry["world_size"] = identity["rank"], identity["world_size"]
    for parent_pid, children in parents.items():
        nprocs = len(children)
        parent = by_pid.get(parent_pid) or {}
        # A plain Process has no index: its place among its siblings, in the order they started
        for index, entry in enumerate(sorted(children, key=lambda e: e["pid"])):
            if entry["local_rank"] is None:
                entry["local_rank"] = index
        for entry in children:
            if entry["rank"] is None and entry["local_rank"] is not None:
                base = parent.get("rank") or 0
                entry["rank"] = base * nprocs + entry["local_rank"]
                entry["errors"].append(
                    f"rank {entry['rank']} inferred as the launching process's rank ({base}) x "
                    f"{nprocs} processes + index {entry['local_rank']}: the spawned function "
                    "has no local named rank or global_rank"
                )
            if entry["world_size"] is None and parent.get("world_size"):
                entry["world_size"] = parent["world_size"] * nprocs
        if parent:
            parent.update(role="agent", rank=None, local_rank=None, world_size=None,
                          launcher=children[0]["launcher"], rank_pid=None)
    # Whatever else hung below a parent (its resource tracker) is its own process now; a
    # spawned rank's own workers (DataLoader) hang under that rank.
    ranks = {e["pid"] for e in entries if e["role"] == "rank"}
    for entry in entries:
        if entry["role"] in ("dataloader_worker", "child") and entry["rank_pid"] in parents:
            owner = _nearest(entry["ppid"], by_pid, ranks)
            entry["rank_pid"] = owner
            if owner is None:
                entry["role"] = "child"
    return spawned


def _nearest(pid, by_pid, ranks):
    seen = set()
    while pid in by_pid and pid not in seen:
        if pid in ranks:
            return pid
        seen.add(pid)
        pid = by_pid[pid]["ppid"]
    return None


def read_usage(pid, stat):
    """CPU seconds of the process and of each of its threads, and its I/O counters, now.

    {"cpu_s": total, "threads": {tid: cpu_s}, "io": [rchar, wchar, read_bytes, write_bytes],
    "main_io": the same of the main thread (/proc/PID/task/PID/io)} (null when unreadable).
    Read at each sample: the analysis measures progress from the differences between samples
    (utime+stime of /proc/PID/task/TID/stat).
    """
    tick = float(os.sysconf("SC_CLK_TCK"))
    threads = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tids = []
    for tid in tids:
        data = _read(f"/proc/{pid}/task/{tid}/stat", one_show=True)
        if not data:
            continue
        fields = data[data.rfind(")") + 2 :].split()
        try:
            threads[tid] = round((int(fields[11]) + int(fields[12])) / tick, 2)
        except (IndexError, ValueError):
            continue
    return {
        "cpu_s": round(stat["ticks"] / tick, 2),
        "threads": threads,
        "io": _io_counters(f"/proc/{pid}/io"),
        # the main thread's own: a rank blocked in a write whose pipe drains moves them
        "main_io": _io_counters(f"/proc/{pid}/task/{pid}/io"),
    }


def _io_counters(path):
    """[rchar, wchar, read_bytes, write_bytes] of a /proc io file, None if unreadable."""
    text = _read(path, one_show=True)
    if not text:
        return None
    values = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        values[name.strip()] = value.strip()
    try:
        return [int(values[k]) for k in ("rchar", "wchar", "read_bytes", "write_bytes")]
    except (KeyError, ValueError):
        return None


def group_locals(threads, pid):
    """[frame index, name, repr] of the locals of ``pid``'s main thread that say which process group
    a collective runs on and which groups the rank belongs to: a ProcessGroup object (repr
    ``<torch._C._distributed_c10d.ProcessGroup at 0x..>``, a dict of them), torch's ``-100``
    (new_group's result on a non-member), and the c10d wrapper's ``args``/``kwargs`` (no
    ProcessGroup there: the call runs on the default group); and a collective's handle
    (``<torch._C._distributed_c10d.Work at 0x..>``: a frame polling an async collective); and
    the world size and rank a rank gave ``init_process_group`` while it waits there (the world
    it asked for, which no environment variable may say).
    """
    main = next((t for t in threads if t.get("os_thread_id") == pid), None)
    out = []
    for index, frame in enumerate((main or {}).get("frames") or ()):
        file = frame.get("filename") or ""
        wrapper = file.endswith("distributed/c10d_logger.py")
        joining = (_bare(frame.get("name")) == "init_process_group"
                   and file.endswith("distributed/distributed_c10d.py"))
        for item in frame.get("locals") or ():
            text = str(item.get("repr") or "")
            if ("c10d.ProcessGroup at 0x" in text or text == "-100" or ": -100" in text
                    or "c10d.Work at 0x" in text
                    or (wrapper and item.get("name") in ("args", "kwargs"))
                    or (joining and item.get("name") in ("world_size", "rank"))):
                out.append([index, item.get("name"), text[:400]])
    return out


#: (stdlib file, functions) whose ``self`` is what a thread waits on for another thread: a
#: queue's get or put, an Event's, a Condition's or a Barrier's wait, a Semaphore's acquire.
_THREAD_WAITS = (
    ("queue.py", ("get", "put")),
    ("threading.py", ("wait", "acquire", "wait_for")),
)


def _self_of(frame):
    """The repr of a frame's ``self`` local when it is an object with an address, else None."""
    text = next((str(item.get("repr") or "") for item in frame.get("locals") or ()
                 if item.get("name") == "self"), "")
    return text if " at 0x" in text else None


def _waited_object(frames):
    """(what the main thread's frames, innermost first, wait on for another thread, the object
    whose method waits on it), or None: the ``self`` of the outermost of its innermost run of
    thread-to-thread waits (``Queue.get`` above the ``Condition.wait`` it calls: the queue),
    and the ``self`` of the frame that called it (a ``Prefetcher`` whose ``self._queue`` it
    is), None there for a function."""
    found = None
    for frame in frames:
        file, name = frame.get("filename") or "", _bare(frame.get("name"))
        if frame.get("module"):  # a native frame (--native: its library): the C code under it
            continue
        if not any(file.endswith("/" + stdlib) and name in names
                   for stdlib, names in _THREAD_WAITS):
            return (found, _self_of(frame)) if found else None
        found = _self_of(frame) or found
    return (found, None) if found else None


def _address(text):
    return text[text.index(" at 0x") + 4:].split(">", 1)[0]


def waited_holders(threads, pid):
    """{"object": repr, "owner": repr or None, "holders": [OS thread ids]} of ``pid``'s main
    thread parked on a queue, an event, a condition, a barrier or a semaphore
    (_waited_object): the other threads whose locals (py-spy --locals, any frame) hold that
    object or its owner, by address; None when the main thread waits on none. A loader thread
    handed its queue as an argument holds it, and so does a ``Prefetcher``'s fill thread (its
    ``self``, the owner of the ``self._queue`` the main thread waits on); a producer reaching a
    module's global queue holds neither, so no holder proves no producer. What makes it lie:
    another method of the owner on a thread of its own (a ``Trainer``'s heartbeat) holds it
    too."""
    main = next((t for t in threads if t.get("os_thread_id") == pid), None)
    waited = _waited_object((main or {}).get("frames") or ())
    if waited is None:
        return None
    addresses = [_address(text) for text in waited if text]
    holders = []
    for thread in threads:
        if thread is main or thread.get("os_thread_id") is None:
            continue
        for frame in thread.get("frames") or ():
            if any(_holds(str(item.get("repr") or ""), address)
                   for item in frame.get("locals") or () for address in addresses):
                holders.append(thread["os_thread_id"])
                break
    return {"object": waited[0][:200], "owner": waited[1] and waited[1][:200],
            "holders": holders}


def _holds(text, address):
    """``text`` (a local's repr) names the object at ``address`` (not a longer address)."""
    start = text.find(address)
    while start >= 0:
        end = start + len(address)
        if end == len(text) or text[end] not in "0123456789abcdef":
            return True
        start = text.find(address, end)
    return False


def read_schedule(pid):
    """{TID: (times put on a CPU, ns run)} of every thread of ``pid`` (/proc/PID/task/TID/
    schedstat), or None when any cannot be read (a kernel without CONFIG_SCHED_INFO)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    out = {}
    for tid in tids:
        fields = (_read(f"/proc/{pid}/task/{tid}/schedstat", one_show=True) or "").split()
        if len(fields) < 3:
            return None
        out[tid] = (fields[2], fields[0])
    return out


#: The native threads of one gloo process group, as torch names them: its device's event loop
#: (reads what the peers send), then its worker threads (run the collectives).
GLOO_LOOP, GLOO_WORKER = "gloo_tcp_loop", "pt_gloo_runloop"


def gloo_workers(pid):
    """[[the worker thread ids of each gloo process group of ``pid``]], in the order the groups
    were made (by thread id: the default group first), or None without any group, with a group
    without workers, or when it cannot be read. A group's workers are those made after its
    loop thread and before the next group's: they run its collectives, so one that completes
    wakes them, and a group whose ranks are all stuck in a collective leaves them asleep,
    whatever its other groups do (heartbeat_group_hang). The loop thread itself wakes ~100
    times a second, data or not (measured): not a sign."""
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except (OSError, ValueError):
        return None
    groups = []  # type: list
    for tid in tids:
        name = (_read(f"/proc/{pid}/task/{tid}/comm", one_show=True) or "").strip()
        if name == GLOO_LOOP:
            groups.append([])
        elif name == GLOO_WORKER and groups:
            groups[-1].append(tid)
    # a loop without workers: a group being made or ended, or threads named otherwise
    return groups if groups and all(groups) else None


def _scheduled(pid, tid):
    fields = (_read(f"/proc/{pid}/task/{tid}/schedstat", one_show=True) or "").split()
    return (fields[2], fields[0]) if len(fields) >= 3 else None


def gloo_schedule(pid, groups):
    """{thread id: (times put on a CPU, ns run)} of each group's workers (gloo_workers'). py-spy's
    suspend and strace's attach and detach wake every thread: read it after the one, and
    gloo_groups_ran before the other."""
    return [{tid: _scheduled(pid, tid) for tid in members} for members in groups]


def gloo_groups_ran(pid, before):
    """[whether each group of ``before`` (gloo_schedule's) had a worker put on a CPU since, or
    end]."""
    return [any(seen is None or _scheduled(pid, tid) != seen for tid, seen in group.items())
            for group in before]


def _exec_start(path):
    """``se.exec_start`` of a /proc .../sched file: the scheduler's clock (ms) when the thread
    last went on a CPU, or stopped running if it sleeps (kernels with CONFIG_SCHED_DEBUG); None."""
    for line in (_read(path) or "").splitlines():
        if line.startswith("se.exec_start"):
            try:
                return float(line.partition(":")[2])
            except ValueError:
                return None
    return None


def _last_cpu(pid, tid):
    data = _read(f"/proc/{pid}/task/{tid}/stat", one_show=True) or ""
    fields = data[data.rfind(")") + 2:].split()
    return _as_int(fields[36]) if len(fields) > 36 else None


def _last_runs(pid, groups, allowed):
    """[[(the CPU, its clock's ms) when each thread of a group last ran]], or None when any
    cannot be read (or ran on a CPU this thread may not move to)."""
    last = []
    for members in groups:
        threads = [(_last_cpu(pid, tid), _exec_start(f"/proc/{pid}/task/{tid}/sched"))
                   for tid in members]
        if any(cpu is None or start is None or cpu not in allowed for cpu, start in threads):
            return None
        last.append(threads)
    return last


def idle_ms_of(watched):
    """{pid: [ms since a thread of each of its groups of thread ids last ran] or None when it
    cannot be read} for ``watched`` {pid: groups}. Read before any dump, which wakes every
    thread: how long each group had been idle when the look began. ``se.exec_start`` is on the
    clock of the CPU the thread last ran on, and those clocks are hundreds of ms apart on a VM
    (they leave out the time stolen by the host, each its own): each is compared with that
    CPU's clock now, read by moving this thread there, once a CPU for every process."""
    out = dict.fromkeys(watched)
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return out
    seen = {pid: last for pid, groups in watched.items()
            if (last := _last_runs(pid, groups, allowed)) is not None}
    clocks = {}
    try:
        for cpu in sorted({cpu for last in seen.values() for group in last for cpu, _ in group}):
            os.sched_setaffinity(0, {cpu})
            clocks[cpu] = _exec_start("/proc/thread-self/sched")
    except OSError:
        return out
    finally:
        try:
            os.sched_setaffinity(0, allowed)
        except OSError:
            pass
    if None in clocks.values():
        return out
    for pid, last in seen.items():
        out[pid] = [max(0, int(min(clocks[cpu] - start for cpu, start in group)))
                    for group in last]
    return out


def unchanged_sample(sample, before, now):
    """Does ``sample`` still hold? True when no thread it shows has been on a CPU since
    ``before`` (the threads' schedule read before its dump) and no thread was created or
    ended since: a thread that did not run cannot have changed its Python stack, whether it
    holds the GIL, or its wait. What it cannot see: a native thread (never in a sample) that ran
    and entered Python meanwhile (PyGILState_Ensure) is missing from a sample reused; a thread
    that Python code starts is made by a thread that ran, so it is not."""
    if not sample or sample.get("threads") is None or before is None or now is None:
        return False
    if before.keys() != now.keys():
        return False
    for thread in sample["threads"]:
        tid = str(thread.get("os_thread_id"))
        if tid not in now or before.get(tid) != now[tid]:
            return False
    return True


def reuse_sample(pid, previous, index, clock):
    """The sample repeating ``previous`` (the process' sample number ``index``, from 0): its
    time, a fresh CPU and I/O reading, and a note; None when the process is gone."""
    stat = read_stat(pid)
    if stat is None or stat["state"] in ("Z", "X"):
        return None
    return {
        "t": round(time.time() - clock.started, 3),
        "threads": previous["threads"],
        "error": None,
        "usage": read_usage(pid, stat),
        "same_as": index,
        "note": f"same as sample {index + 1}: none of its threads ran since (schedstat); "
        "not read again",
    }


#: How long a blocking dump may wait for the suspend of every thread (a dump of a torch rank
#: takes 10-50 ms, ~0.5 s with 64 dumps at once on 2 cores) before it is read without it; a
#: --native dump, which reads libtorch's symbols (seconds), keeps the whole timeout.
SUSPEND_WAIT_S = 3.0
#: pid -> why its blocking dump once timed out (read with --nonblocking from then on)
_NOT_SUSPENDED = {}  # type: dict


def _unsuspendable(pid, state, traced):
    """Why py-spy cannot suspend ``pid`` (and reads it with --nonblocking), else None: stopped
    (T/t), in state D, strace attached, a suspend that timed out before, or its main thread
    waiting for a FUSE server's answer (request_wait_answer: interruptible, but an interrupt
    turns the wait uninterruptible and the suspend never completes). A main thread stopped or
    in the kernel runs no Python code meanwhile: its stack is read exactly."""
    if traced:
        return "strace attached"
    if state in ("T", "t", "D"):
        return f"process in state {state}"
    if pid in _NOT_SUSPENDED:
        return _NOT_SUSPENDED[pid]
    if (_read(f"/proc/{pid}/wchan", one_show=True) or "").strip() == "request_wait_answer":
        return "its main thread waits for a FUSE file system's answer (request_wait_answer)"
    return None


TORN_READ = ("Failed to copy", "Bad address", "os error 14")


def _torn(text):
    """py-spy failed reading the interpreter's memory as it changed (not a refusal or a gone
    process): worth one more read."""
    return any(word in text for word in TORN_READ)


def dump_stack(pyspy, pid, native, clock, traced=False, groups=False):
    """Task: one py-spy sample of ``pid``, {"t", "threads", "error"} (+ "note" when read oddly).
    ``traced``: strace is attached to it, so py-spy cannot suspend it: read with --nonblocking.
    ``groups``: read with --locals and keep only the process-group ones (group_locals)."""
    t = round(time.time() - clock.started, 3)
    stat = read_stat(pid)
    if stat is None:
        return {"t": t, "threads": None, "error": "process exited"}
    state = stat["state"]
    if state in ("Z", "X"):
        return {"t": t, "threads": None, "error": f"process is a zombie (state {state})"}
    timeout = min(10.0, clock.left())
    if timeout < 0.2:
        return {"t": t, "threads": None, "error": "skipped: deadline"}
    argv = [pyspy, "dump", "--json", "--pid", str(pid)]
    note = None
    # A stopped process (T/t) makes the blocking dump fail ("Failed to suspend process"), and one
    # in D cannot be suspended until its syscall returns; neither runs Python code meanwhile, so
    # reading without suspending is exact. --native needs the suspend.
    why = _unsuspendable(pid, state, traced)
    if why:
        argv.append("--nonblocking")
        note = f"read with --nonblocking: {why}"
        if native:
            note += "; native frames skipped (they need the suspend)"
    elif native:
        argv.append("--native")
    if groups:
        argv.append("--locals")
    usage = read_usage(pid, stat)
    # (--native reads the C libraries' symbols too, seconds for libtorch: its own timeout)
    rc, out, err, timeout_note = yield from tool_run(
        argv, timeout if why or native else min(SUSPEND_WAIT_S, timeout))
    if not why and timeout_note and clock.left() > 1.0:
        # The suspend never completed: one of its threads waits in the kernel where no stop
        # reaches it (another thread's FUSE request: interrupted, its wait turned
        # uninterruptible). Read it as it is, now and in the rounds after.
        _NOT_SUSPENDED[pid] = f"its suspend did not complete in {SUSPEND_WAIT_S:g} s"
        argv = [a for a in argv if a != "--native"] + ["--nonblocking"]
        note = f"read with --nonblocking: {_NOT_SUSPENDED[pid]}"
        if native:
            note += "; native frames skipped (they need the suspend)"
        rc, out, err, timeout_note = yield from tool_run(argv, min(10.0, clock.left()))
    if rc != 0 and not timeout_note and _torn(err or out) and clock.left() > 1.0:
        # a read of memory the interpreter was changing (a running rank, py-spy 0.4: "Failed to
        # copy PyCodeObject ... Bad address"): once more, at once
        first = _one_line(err or out)
        rc, out, err, timeout_note = yield from tool_run(argv, min(10.0, clock.left()))
        note = "; ".join(filter(None, (note, f"read twice: the first read was torn ({first})")))
    if rc == 0:
        try:
            raw = to_node_tids(loads(out), pid)
            sample = {"t": t, "threads": slim_threads(raw), "error": None, "usage": usage}
            if groups:
                sample["groups"] = group_locals(raw, pid)
                waited = waited_holders(raw, pid)
                if waited is not None:
                    sample["waited"] = waited
            if note:
                sample["note"] = note
            return sample
        except (ValueError, AttributeError, TypeError) as exc:
            return {"t": t, "threads": None, "error": f"py-spy output not JSON: {exc}"}
    error = timeout_note or _one_line(err or out) or f"py-spy exit code {rc}"
    return {"t": t, "threads": None, "error": "py-spy: " + error}

"""slurmdiag node collector: one framed JSON document about a Slurm job's processes on this node.

Stdlib only, python3.8+, never imports slurmdiag. The controller runs it as
``python3 -I -S -c <this source> <args-json>`` in one ``srun --overlap`` step (or over ssh), one
task per node. Every node pays its start-up, so modules are imported only where they are needed.

Phases: find the job's processes (scontrol listpids, else /proc environ) -> rank identity from
environ -> K rounds of ``py-spy dump --json`` (ranks in parallel) -> ``strace -c`` (after py-spy:
the two conflict) -> GPUs, NICs, sockets. Nothing blocks past ``deadline_s``: phases shrink or are
skipped and say so in "errors", and a watchdog emits whatever exists just before the deadline.

stdout carries only frames (see _frame_lines): ``@SDG1-HELLO <node> <pid>``, then the document as
base64(zlib(json)) cut into ``@SDG1 <node> <seq> <total> <crc32> <chunk>`` lines, each written with
one os.write so that srun's merging of many nodes' stdout cannot cut a line.
"""

import json
import os
import sys
import time

FORMAT = 1
COLLECTOR_VERSION = "1"
CHUNK_CHARS = 600
# Time kept back from the deadline for joining threads, encoding and writing the frames.
FINISH_RESERVE_S = 0.4
# The watchdog fires this long before the deadline if the main thread has not emitted yet.
WATCHDOG_MARGIN_S = 0.15
MARKER_ENV = "SLURMDIAG_COLLECTOR"

SKIP_COMMS = frozenset(
    [
        "slurmstepd",
        "srun",
        "salloc",
        "sbatch",
        "bash",
        "sh",
        "zsh",
        "dash",
        "ksh",
        "tcsh",
        "csh",
        "fish",
        "sleep",
        "py-spy",
        "strace",
        "scontrol",
        "nvidia-smi",
        "dmesg",
        "ip",
    ]
)
ALLOW_ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_")
DENY_ENV_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASS", "CRED", "AUTH")
ALLOW_ENV_NAMES = frozenset(
    [
        "CUDA_VISIBLE_DEVICES",
        "MASTER_ADDR",
        "MASTER_PORT",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "TORCHELASTIC_RUN_ID",
        "OMP_NUM_THREADS",
        "SLURM_JOB_ID",
        "SLURM_STEP_ID",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_NTASKS",
        "SLURM_NODEID",
        "SLURMD_NODENAME",
        "SLURM_JOB_NODELIST",
        "SLURM_CPUS_ON_NODE",
    ]
)
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")
WORLD_SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")
TCP_STATES = {
    "01": "ESTABLISHED",
    "02": "SYN_SENT",
    "03": "SYN_RECV",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "07": "CLOSE",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0A": "LISTEN",
    "0B": "CLOSING",
    "0C": "NEW_SYN_RECV",
}
MAX_ARG_CHARS = 2000
MAX_CONNECTIONS = 300


class Clock:
    """Wall-time budget: ``left()`` is what remains before the deadline minus the finish reserve."""

    def __init__(self, deadline_s):
        self.started = time.time()
        self.t0 = time.monotonic()
        self.deadline = self.t0 + deadline_s

    def elapsed(self):
        return time.monotonic() - self.t0

    def left(self):
        return self.deadline - FINISH_RESERVE_S - time.monotonic()


# ---------------------------------------------------------------- running tools

# Tools still running (pid -> Popen), so that the watchdog or SIGTERM can end them (strace!).
_LIVE = {}  # type: dict[int, object]
_LIVE_LOCK = None


def _lock():
    global _LIVE_LOCK
    if _LIVE_LOCK is None:
        import threading

        _LIVE_LOCK = threading.Lock()
    return _LIVE_LOCK


def _child_env():
    env = dict(os.environ)
    env["LC_ALL"] = "C"  # strace -c prints decimals with the locale's separator
    env[MARKER_ENV] = "1"  # our own tools are never mistaken for job processes
    return env


def _start(argv, stderr_to_stdout=False):
    import subprocess

    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if stderr_to_stdout else subprocess.PIPE,
        env=_child_env(),
        start_new_session=True,  # a timeout kills the tool's whole process group
    )
    with _lock():
        _LIVE[proc.pid] = proc
    return proc


def _finish(proc, timeout):
    """Wait for ``proc`` up to ``timeout``; kill its group if late. Returns (rc, out, err, note)."""
    import subprocess

    note = None
    try:
        out, err = proc.communicate(timeout=max(timeout, 0.01))
    except subprocess.TimeoutExpired:
        note = f"timed out after {timeout:.1f} s"
        _kill_group(proc)
        try:
            out, err = proc.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:  # stuck in D state: leave it, never block the output
            out, err = b"", b""
            note += " and did not exit after SIGKILL"
    with _lock():
        _LIVE.pop(proc.pid, None)
    return proc.returncode, _text(out), _text(err), note


def run(argv, timeout):
    """Run a tool with a timeout (the one place that waits on tools). Never raises."""
    try:
        proc = _start(argv)
    except OSError as exc:
        return None, "", "", f"could not start {argv[0]}: {exc.strerror or exc}"
    return _finish(proc, timeout)


def _kill_group(proc, sig=9):
    try:
        os.killpg(proc.pid, sig)
    except OSError:
        pass


def _kill_live_tools():
    with _lock():
        procs = list(_LIVE.values())
    for proc in procs:
        _kill_group(proc)


def _text(data):
    if data is None:
        return ""
    return data.decode("utf-8", "replace")


def _one_line(text, limit=300):
    """The informative part of a tool's error output, as one line."""
    lines = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("Stack backtrace:"):  # py-spy appends a Rust backtrace
            break
        if line:
            lines.append(line)
    joined = "; ".join(lines[-3:])
    return joined[:limit] if joined else ""


def find_tool(name, candidates):
    """The first candidate that is an executable file, else ``name`` on PATH, else None."""
    for path in candidates or ():
        if isinstance(path, str) and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    for directory in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep):
        path = os.path.join(directory or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def parallel(fn, items, concurrency):
    """``[fn(x) for x in items]`` on at most ``concurrency`` threads; exceptions become strings."""
    items = list(items)
    results = [None] * len(items)
    if not items:
        return results
    import threading

    queue = list(enumerate(items))
    queue.reverse()
    guard = threading.Lock()

    def work():
        while True:
            with guard:
                if not queue:
                    return
                index, item = queue.pop()
            try:
                results[index] = fn(item)
            except Exception as exc:  # noqa: BLE001 - a bug for one process must not lose the others
                results[index] = exc

    count = max(1, min(int(concurrency or 1), len(items)))
    if count == 1:
        work()
        return results
    threads = [threading.Thread(target=work, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


# ---------------------------------------------------------------- /proc readers


def _read(path, binary=False):
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return data if binary else data.decode("utf-8", "replace")


def _read_int(path):
    text = _read(path)
    try:
        return int(text.strip())
    except (AttributeError, ValueError):
        return None


def read_stat(pid):
    """Fields of /proc/PID/stat we use, or None if the process is gone."""
    data = _read(f"/proc/{pid}/stat")
    if not data:
        return None
    close = data.rfind(")")
    fields = data[close + 2 :].split()
    try:
        return {
            "comm": data[data.find("(") + 1 : close],
            "state": fields[0],
            "ppid": int(fields[1]),
            "ticks": int(fields[11]) + int(fields[12]),
            "num_threads": int(fields[17]),
            "starttime": int(fields[19]),
            "rss_pages": int(fields[21]),
        }
    except (IndexError, ValueError):
        return None


def read_environ(pid):
    data = _read(f"/proc/{pid}/environ", binary=True)
    if data is None:
        return None
    env = {}
    for item in data.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep and name:
            env[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def read_cmdline(pid):
    data = _read(f"/proc/{pid}/cmdline", binary=True)
    if data is None:
        return []
    args = data.split(b"\0")
    if args and args[-1] == b"":
        args.pop()
    out = []
    for arg in args:
        text = arg.decode("utf-8", "replace")
        if len(text) > MAX_ARG_CHARS:
            text = text[:MAX_ARG_CHARS] + f"...[{len(text) - MAX_ARG_CHARS} chars cut]"
        out.append(text)
    return out


def allowed_env(env):
    """The environment variables that may leave the node (allowlist; secrets never)."""
    out = {}
    for name in sorted(env):
        if name in ALLOW_ENV_NAMES or (
            name.startswith(ALLOW_ENV_PREFIXES) and not any(w in name for w in DENY_ENV_WORDS)
        ):
            out[name] = env[name]
    return out


# ---------------------------------------------------------------- discovery


def parse_listpids(text):
    """Rows of ``scontrol listpids``: [(pid, step_id or None)]; pids of -1 are dropped."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3 or not parts[0].lstrip("-").isdigit():
            continue  # the header, or noise
        pid = int(parts[0])
        if pid > 0:
            rows.append((pid, None if parts[2] == "-" else parts[2]))
    return rows


def _own_lineage():
    """Our pid and every ancestor (srun task, slurmstepd, ssh shell): never inspected."""
    pids = set()
    pid = os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        stat = read_stat(pid)
        if stat is None:
            break
        pid = stat["ppid"]
    return pids


def discover(job_id, node, scontrol, exclude, clock, errors):
    """Job processes on this node: ({pid: info}, method)."""
    own_env = os.environ
    own_job = own_env.get("SLURM_JOB_ID") or own_env.get("SLURM_JOBID")
    own_step = own_env.get("SLURM_STEP_ID") or own_env.get("SLURM_STEPID")
    exclude = set(exclude) | _own_lineage()

    listed = None
    if scontrol:
        rc, out, err, note = run([scontrol, "listpids", job_id, node], min(5.0, clock.left()))
        rows = parse_listpids(out) if rc == 0 else []
        if rc == 0 and rows:
            listed = {}
            for pid, step in rows:
                if step is not None and own_step and own_job == job_id and step == own_step:
                    continue  # our own srun step
                listed[pid] = step
        else:
            why = note or _one_line(err or out) or "no processes listed"
            errors.append(f"scontrol listpids failed ({why}); scanned /proc instead")
    else:
        errors.append("scontrol not found; scanned /proc instead")

    method = "listpids" if listed is not None else "proc"
    if listed is not None:
        pids = listed
    else:
        pids = {}
        needles = [f"\0{var}={job_id}\0".encode() for var in ("SLURM_JOB_ID", "SLURM_JOBID")]
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            data = _read(f"/proc/{name}/environ", binary=True)
            # A cheap byte test; the parsed environ is checked again below.
            if data and any(needle in b"\0" + data for needle in needles):
                pids[int(name)] = None

    procs = {}
    for pid in pids:
        if pid in exclude:
            continue
        env = read_environ(pid)
        stat = read_stat(pid)
        if stat is None or env is None:
            continue  # exited, or not ours to read
        if (env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")) != job_id and method == "proc":
            continue
        proc_node = env.get("SLURMD_NODENAME")
        if proc_node is not None and proc_node != node:
            continue  # another (emulated) node's process on this same host
        if MARKER_ENV in env:
            continue  # a tool started by a slurmdiag collector
        step = pids[pid] or env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
        if own_step and step == own_step and env.get("SLURM_JOB_ID") == own_job:
            continue  # a process of our own step
        cmdline = read_cmdline(pid)
        if any(
            "@SDG1-HELLO" in arg or arg.endswith("slurmdiag/collector/node.py") for arg in cmdline
        ):
            continue  # another slurmdiag collector attached to the same job
        procs[pid] = {"pid": pid, "env": env, "stat": stat, "cmdline": cmdline, "step_id": step}
    return procs, method


def _agent_kind(cmdline):
    """The launcher a process is, judged from its first arguments, or None."""
    head = cmdline[:4]
    bases = [os.path.basename(arg) for arg in head]
    for arg, base in zip(head, bases):
        if base == "torchrun" or arg in ("torch.distributed.run", "torch.distributed.launch"):
            return "torchrun"
        if arg.endswith(("torch/distributed/run.py", "torch/distributed/launch.py")):
            return "torchrun"
        if base == "accelerate" or arg.startswith("accelerate.commands"):
            return "accelerate"
        if base == "deepspeed" or arg.startswith("deepspeed.launcher"):
            return "deepspeed"
    return None


def _is_python(info):
    if info["stat"]["comm"].startswith("python"):
        return True
    if info["cmdline"] and os.path.basename(info["cmdline"][0]).startswith("python"):
        return True
    try:
        return "python" in os.path.basename(os.readlink("/proc/{}/exe".format(info["pid"])))
    except OSError:
        return False


def _first(env, names):
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            return value
    return None


def _as_int(value):
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _looks_multiprocessing(info):
    joined = " ".join(info["cmdline"][:4])
    return (
        "spawn_main" in joined
        or "--multiprocessing-fork" in joined
        or "forkserver" in joined
        or info["stat"]["comm"].startswith("pt_data")
    )


def classify(procs):
    """Set role (rank | dataloader_worker | child | agent | None=skip) and rank_pid in place.

    A process below a rank (in the job's own process tree) that carries the same rank identity,
    or is a multiprocessing child, or a fork with the same command line, is that rank's worker.
    A "rank" that turns out to have started other ranks is their launcher ("agent"), and the
    tree is classified again with that knowledge.
    """
    launchers = set()
    for _ in range(4):
        _classify_once(procs, launchers)
        found = set()
        for info in procs.values():
            if info["role"] == "rank":
                owner = next(
                    (a for a in _ancestors(procs, info["pid"]) if a["role"] == "rank"), None
                )
                if owner is not None:
                    found.add(owner["pid"])
        if found <= launchers:
            break
        launchers |= found


def _ancestors(procs, pid):
    seen = set()
    pid = procs[pid]["stat"]["ppid"]
    while pid in procs and pid not in seen:
        seen.add(pid)
        yield procs[pid]
        pid = procs[pid]["stat"]["ppid"]


def _classify_once(procs, launchers):
    depth = {pid: sum(1 for _ in _ancestors(procs, pid)) for pid in procs}
    for pid in procs:
        procs[pid]["role"] = None
    for pid in sorted(procs, key=lambda p: (depth[p], p)):
        info = procs[pid]
        info["rank_pid"] = None
        info["global_rank"] = _first(info["env"], RANK_VARS)
        if info["stat"]["comm"] in SKIP_COMMS:
            continue
        kind = _agent_kind(info["cmdline"])
        if kind is None and pid in launchers:
            kind = "submitit" if "submitit" in " ".join(info["cmdline"]) else "launcher"
        if kind:
            info["role"], info["agent_kind"] = "agent", kind
            continue
        owner = next(
            (
                a
                for a in _ancestors(procs, pid)
                if a["role"] in ("rank", "child", "dataloader_worker")
            ),
            None,
        )
        if owner is not None:
            rank = procs[owner["rank_pid"]] if owner["rank_pid"] else owner
            if (
                info["global_rank"] == rank["global_rank"]
                or _looks_multiprocessing(info)
                or info["cmdline"] == rank["cmdline"]
                or not _is_python(info)
            ):
                info["rank_pid"] = rank["pid"]
                info["role"] = "dataloader_worker" if _looks_multiprocessing(info) else "child"
                continue
        if _is_python(info):
            info["role"] = "rank"


def _launcher(info, procs):
    env = info["env"]
    pid = info["stat"]["ppid"]
    seen = set()
    while pid in procs and pid not in seen:
        seen.add(pid)
        parent = procs[pid]
        if parent["role"] == "agent":
            kind = parent.get("agent_kind")
            if kind in ("torchrun", "accelerate", "deepspeed", "submitit"):
                return kind
            break
        pid = parent["stat"]["ppid"]
    if env.get("TORCHELASTIC_RUN_ID"):
        return "torchrun"
    if "submitit" in " ".join(info["cmdline"]) or any(k.startswith("SUBMITIT_") for k in env):
        return "submitit"
    if any(k.startswith(("DEEPSPEED_", "DS_ACCELERATOR")) for k in env):
        return "deepspeed"
    if any(k.startswith("ACCELERATE_") for k in env):
        return "accelerate"
    procid = env.get("SLURM_PROCID")
    if "OMPI_COMM_WORLD_RANK" in env:
        return "mpirun"
    pmi = env.get("PMI_RANK") or env.get("PMIX_RANK")
    if pmi is not None and pmi != procid:
        return "mpirun"
    if procid is not None:
        return "srun"
    return "unknown"


# ---------------------------------------------------------------- py-spy and strace


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


def _in_dataloader_loop(threads):
    for thread in threads or ():
        for frame in thread["frames"]:
            if frame["name"] == "_worker_loop" and "utils/data" in (frame["filename"] or ""):
                return True
    return False


def dump_stack(pyspy, pid, native, clock):
    """One py-spy sample of ``pid``: {"t", "threads", "error"} (+ "note" when read oddly)."""
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
    if state in ("T", "t", "D"):
        argv.append("--nonblocking")
        note = f"read with --nonblocking: process in state {state}"
        if native:
            note += "; native frames skipped (they need the suspend)"
    elif native:
        argv.append("--native")
    rc, out, err, timeout_note = run(argv, timeout)
    if rc == 0:
        try:
            sample = {"t": t, "threads": slim_threads(json.loads(out)), "error": None}
            if note:
                sample["note"] = note
            return sample
        except (ValueError, AttributeError, TypeError) as exc:
            return {"t": t, "threads": None, "error": f"py-spy output not JSON: {exc}"}
    error = timeout_note or _one_line(err or out) or f"py-spy exit code {rc}"
    return {"t": t, "threads": None, "error": "py-spy: " + error}


def trace_syscalls(strace, pid, window_s, clock):
    """``strace -c -f -p PID`` for ``window_s`` seconds, then SIGINT; the raw -c table text."""
    stat = read_stat(pid)
    if stat is None:
        return {"status": "error", "message": "process exited", "window_s": 0.0, "text": ""}
    if stat["state"] in ("T", "t", "Z", "X"):
        # Attaching to a stopped process must not resume it, and it makes no syscalls anyway.
        return {
            "status": "skipped",
            "window_s": 0.0,
            "text": "",
            "message": "process is in state {}; not attached".format(stat["state"]),
        }
    try:
        proc = _start([strace, "-c", "-f", "-p", str(pid)], stderr_to_stdout=True)
    except OSError as exc:
        return {
            "status": "error",
            "message": f"could not start strace: {exc}",
            "window_s": 0.0,
            "text": "",
        }
    begun = time.monotonic()
    import signal
    import subprocess

    try:
        proc.wait(timeout=window_s)
    except subprocess.TimeoutExpired:
        try:
            proc.send_signal(signal.SIGINT)  # strace prints the -c table when interrupted
        except OSError:
            pass
    rc, out, _, note = _finish(proc, min(3.0, max(clock.left(), 0.5)))
    window = round(time.monotonic() - begun, 3)
    ok = "% time" in out or ("attached" in out and "detached" in out)
    if ok and not note:
        return {"status": "ok", "message": None, "window_s": window, "text": out}
    message = note or _one_line(out) or f"strace exit code {rc}"
    return {"status": "error", "message": message, "window_s": window, "text": out}


# ---------------------------------------------------------------- GPUs

GPU_FIELDS = (
    "index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total,"
    "temperature.gpu,power.draw,clocks_event_reasons.active,ecc.errors.uncorrected.volatile.total,"
    "pcie.link.gen.current,pcie.link.width.current,retired_pages.pending,remapped_rows.pending"
)
GPU_FIELD_SETS = (
    GPU_FIELDS,
    # Drivers before 535 know the field as clocks_throttle_reasons.
    GPU_FIELDS.replace("clocks_event_reasons", "clocks_throttle_reasons"),
    (
        "index,uuid,name,utilization.gpu,utilization.memory,memory.used,memory.total,"
        "temperature.gpu,power.draw"
    ),
)


def _tool_result(argv, rc, out, err, note):
    text = out if not err else (out + ("\n" if out and not out.endswith("\n") else "") + err)
    return {"argv": argv, "returncode": rc, "text": text, "error": note}


def collect_gpus(nvidia_smi, clock):
    if not nvidia_smi:
        return {
            "status": "absent",
            "message": "no GPUs visible (nvidia-smi not found)",
            "query_gpu": None,
            "compute_apps": None,
            "qx": None,
            "xid_lines": [],
            "xid_error": None,
        }
    gpu = {
        "status": "error",
        "message": None,
        "query_gpu": None,
        "compute_apps": None,
        "qx": None,
        "xid_lines": [],
        "xid_error": None,
    }
    for fields in GPU_FIELD_SETS:
        argv = [nvidia_smi, "--query-gpu=" + fields, "--format=csv"]
        result = _tool_result(argv, *run(argv, min(10.0, clock.left())))
        gpu["query_gpu"] = result
        if result["returncode"] == 0 or result["error"]:
            break  # success, or a hang/timeout that a retry would only repeat
    if gpu["query_gpu"]["returncode"] == 0:
        gpu["status"] = "ok"
        argv = [
            nvidia_smi,
            "--query-compute-apps=gpu_uuid,pid,process_name,used_gpu_memory",
            "--format=csv",
        ]
        gpu["compute_apps"] = _tool_result(argv, *run(argv, min(10.0, clock.left())))
    else:
        failed = gpu["query_gpu"]
        if not failed["error"] and clock.left() > 1.0:
            argv = [nvidia_smi, "-q", "-x"]
            gpu["qx"] = _tool_result(argv, *run(argv, min(10.0, clock.left())))
        text = failed["text"]
        if "No devices were found" in text:
            gpu["status"] = "absent"
        gpu["message"] = "nvidia-smi failed: " + (
            failed["error"] or _one_line(text) or "exit code {}".format(failed["returncode"])
        )
    if clock.left() > 0.5:
        rc, out, err, note = run(["dmesg", "-T"], min(2.0, clock.left()))
        if rc == 0:
            gpu["xid_lines"] = [line for line in out.splitlines() if "NVRM: Xid" in line][-50:]
        else:
            gpu["xid_error"] = "dmesg: " + (note or _one_line(err) or f"exit code {rc}")
    else:
        gpu["xid_error"] = "dmesg skipped: deadline"
    return gpu


# ---------------------------------------------------------------- NICs and sockets

ARPHRD_KINDS = {
    1: "ether",
    32: "infiniband",
    772: "loopback",
    65534: "none",
    776: "sit",
    778: "gre",
    768: "ipip",
    769: "tunnel6",
}


def collect_nics(ip_tool, clock):
    interfaces = []
    message = None
    try:
        names = sorted(os.listdir("/sys/class/net"))
    except OSError as exc:
        names = []
        message = f"cannot list /sys/class/net: {exc.strerror}"
    for name in names:
        base = "/sys/class/net/" + name
        arphrd = _read_int(base + "/type")
        if os.path.isdir(base + "/bridge"):
            kind = "bridge"
        elif os.path.isdir(base + "/bonding"):
            kind = "bond"
        else:
            kind = ARPHRD_KINDS.get(arphrd, f"arphrd_{arphrd}")
        speed = _read_int(base + "/speed")  # EINVAL on links that are down
        state = _read(base + "/operstate")
        interfaces.append(
            {
                "name": name,
                "state": state.strip() if state else None,
                "mtu": _read_int(base + "/mtu"),
                "speed_mbps": speed if speed is not None and speed >= 0 else None,
                "kind": kind,
                "addresses": [],
            }
        )
    addresses, problem = _addresses(ip_tool, clock, [i["name"] for i in interfaces])
    for item in interfaces:
        item["addresses"] = addresses.get(item["name"], [])
    if problem:
        message = problem if not message else message + "; " + problem
    return {"interfaces": interfaces, "ib_ports": _ib_ports(), "message": message}


def _addresses(ip_tool, clock, names):
    """{ifname: ["addr/prefix", ...]} from ``ip -j addr``, else ioctl + /proc/net/if_inet6."""
    problem = None
    if ip_tool:
        rc, out, err, note = run([ip_tool, "-j", "addr", "show"], min(3.0, clock.left()))
        if rc == 0:
            try:
                found = {}
                for link in json.loads(out):
                    found[link.get("ifname")] = [
                        "{}/{}".format(a.get("local"), a.get("prefixlen"))
                        for a in link.get("addr_info") or ()
                        if a.get("local")
                    ]
                return found, None
            except (ValueError, AttributeError, TypeError) as exc:
                problem = f"ip -j addr output not understood ({exc})"
        else:
            problem = "ip -j addr failed (%s)" % (note or _one_line(err) or rc)
    found = {}
    try:
        import fcntl
        import socket
        import struct

        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for name in names:
                req = struct.pack("256s", name.encode()[:15])
                try:
                    addr = fcntl.ioctl(sock.fileno(), 0x8915, req)[20:24]  # SIOCGIFADDR
                    mask = fcntl.ioctl(sock.fileno(), 0x891B, req)[20:24]  # SIOCGIFNETMASK
                except OSError:
                    continue
                prefix = bin(int.from_bytes(mask, "big")).count("1")  # noqa: FURB161 (3.8)
                found.setdefault(name, []).append(f"{socket.inet_ntoa(addr)}/{prefix}")
        finally:
            sock.close()
    except OSError as exc:
        problem = (problem + "; " if problem else "") + f"ioctl addresses failed: {exc}"
    for line in (_read("/proc/net/if_inet6") or "").splitlines():
        parts = line.split()
        if len(parts) >= 6:
            addr = _ipv6_text(bytes.fromhex(parts[0]))
            found.setdefault(parts[5], []).append(f"{addr}/{int(parts[2], 16)}")
    return found, problem


def _ib_ports():
    ports = []
    root = "/sys/class/infiniband"
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return ports
    for device in devices:
        try:
            numbers = sorted(os.listdir(f"{root}/{device}/ports"), key=lambda s: int(s))
        except (OSError, ValueError):
            continue
        for number in numbers:
            base = f"{root}/{device}/ports/{number}/"
            values = {}
            for key in ("state", "phys_state", "rate", "link_layer"):
                text = _read(base + key)
                values[key] = text.strip() if text is not None else None
            ports.append(dict(device=device, port=int(number), **values))
    return ports


def _ipv6_text(raw16):
    """Compressed text form of a 16-byte IPv6 address (v4-mapped ones as plain IPv4)."""
    if raw16[:12] == b"\0" * 10 + b"\xff\xff":
        return ".".join(str(b) for b in raw16[12:])
    groups = [int.from_bytes(raw16[i : i + 2], "big") for i in range(0, 16, 2)]
    best, best_len, run_start, run_len = -1, 0, -1, 0
    for i, group in enumerate(groups + [1]):
        if group == 0:
            if run_len == 0:
                run_start = i
            run_len += 1
        else:
            if run_len > best_len and run_len >= 2:
                best, best_len = run_start, run_len
            run_len = 0
    parts = [f"{g:x}" for g in groups]
    if best < 0:
        return ":".join(parts)
    return ":".join(parts[:best]) + "::" + ":".join(parts[best + best_len :])


def _kernel_addr(hexaddr):
    """An address from /proc/net/tcp{,6}: 32-bit words in host byte order, printed as hex."""
    raw = bytes.fromhex(hexaddr)
    if sys.byteorder == "little":
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    if len(raw) == 4:
        return ".".join(str(b) for b in raw)
    return _ipv6_text(raw)


def parse_proc_net_tcp(text):
    """{inode: (local_ip, local_port, remote_ip, remote_port, state, tx_queue, rx_queue)}."""
    table = {}
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10:
            continue
        try:
            lip, lport = parts[1].split(":")
            rip, rport = parts[2].split(":")
            txq, rxq = parts[4].split(":")
            table[parts[9]] = (
                _kernel_addr(lip),
                int(lport, 16),
                _kernel_addr(rip),
                int(rport, 16),
                TCP_STATES.get(parts[3].upper(), parts[3]),
                int(txq, 16),
                int(rxq, 16),
            )
        except ValueError:
            continue
    return table


def _endpoint(ip, port):
    return ("[%s]:%d" if ":" in ip else "%s:%d") % (ip, port)


def connections(pid, tables, addr_to_if):
    """TCP sockets held by ``pid`` with the interface each one's local address belongs to."""
    try:
        netns = os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        netns = None
    table = tables.get(netns) if netns else None
    if table is None:
        table = {}
        for name in ("tcp", "tcp6"):
            table.update(parse_proc_net_tcp(_read(f"/proc/{pid}/net/{name}") or ""))
        if netns:
            tables[netns] = table
    inodes = []
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.append(target[8:-1])
    out = []
    for inode in inodes:
        entry = table.get(inode)
        if entry is None:
            continue  # not TCP (unix, udp, netlink)
        lip, lport, rip, rport, state, txq, rxq = entry
        if lip.startswith("127.") or lip == "::1":
            interface = "lo"
        else:
            interface = addr_to_if.get(lip)
        out.append(
            {
                "local": _endpoint(lip, lport),
                "remote": _endpoint(rip, rport),
                "state": state,
                "interface": interface,
                "tx_queue": txq,
                "rx_queue": rxq,
            }
        )
        if len(out) >= MAX_CONNECTIONS:
            break
    out.sort(key=lambda c: (c["state"] != "ESTABLISHED", c["local"], c["remote"]))
    return out


# ---------------------------------------------------------------- framing


def frame_lines(node, doc):
    """The framed lines of ``doc``; the controller's slurmdiag/transport/framing.py decodes them."""
    import binascii
    import zlib

    data = json.dumps(doc, separators=(",", ":"), default=str).encode()
    payload = binascii.b2a_base64(zlib.compress(data, 6), newline=False).decode("ascii")
    crc = "{:08x}".format(zlib.crc32(payload.encode("ascii")) & 0xFFFFFFFF)
    chunks = [payload[i : i + CHUNK_CHARS] for i in range(0, len(payload), CHUNK_CHARS)] or [""]
    total = len(chunks)
    return [f"@SDG1 {node} {seq} {total} {crc} {chunk}\n" for seq, chunk in enumerate(chunks)]


def _write_line(line):
    data = line.encode("ascii", "replace")
    while data:  # one write for lines this short on a pipe; the loop covers odd outputs
        written = os.write(1, data)
        data = data[written:]


class Emitter:
    """Writes the document exactly once: from the main thread, the watchdog, or a signal handler."""

    def __init__(self, node):
        import threading

        self.node = node
        self.lock = threading.Lock()
        self.done = False

    def emit(self, doc, wait=None, before=None):
        """Emit unless already done; ``wait`` None blocks, 0 gives up at once if busy."""
        if wait is None:
            acquired = self.lock.acquire()
        else:
            acquired = self.lock.acquire(True, wait) if wait > 0 else self.lock.acquire(False)
        if not acquired:
            return False
        try:
            if self.done:
                return False
            if before is not None:
                before()
            lines = None
            for _ in range(3):  # other threads may still be adding to doc
                try:
                    lines = frame_lines(self.node, doc)
                    break
                except (RuntimeError, ValueError):
                    time.sleep(0.01)
            if lines is None:
                keep = (
                    "format",
                    "node",
                    "hostname",
                    "python",
                    "collector_version",
                    "started",
                    "duration_s",
                    "discovery",
                    "tools",
                )
                minimal = {k: doc.get(k) for k in keep}
                minimal["errors"] = list(doc.get("errors") or []) + [
                    "document could not be encoded while collection was still running"
                ]
                minimal["processes"] = []
                lines = frame_lines(self.node, minimal)
            for line in lines:
                _write_line(line)
            self.done = True
            return True
        finally:
            self.lock.release()


# ---------------------------------------------------------------- main


def _arg_list(value):
    if isinstance(value, str):
        return [value]
    return [v for v in value or () if isinstance(v, str)]


FR_DUMP_MAX_BYTES = 16 * 1024 * 1024


def _proc_uid(pid):
    text = _read("/proc/{}/status".format(pid)) or ""
    for line in text.splitlines():
        if line.startswith("Uid:"):
            fields = line.split()
            if len(fields) > 1 and fields[1].isdigit():
                return int(fields[1])
    return None


def fr_request(pid, env):
    """Ask a process hooked by slurmdiag.torch for a Flight Recorder dump (a trigger file)."""
    uid = _proc_uid(pid)
    base = env.get("SLURMDIAG_FR_DIR") or "/tmp/slurmdiag-fr-{}".format(uid)
    registration = os.path.join(base, "{}.json".format(pid))
    dump = os.path.join(base, "{}.fr.json".format(pid))
    if not os.path.exists(registration):
        return None
    try:
        os.unlink(dump)  # an old dump must not pass for the one we ask for now
    except OSError:
        pass
    trigger = os.path.join(base, "{}.trigger".format(pid))
    try:
        with open(trigger, "w"):
            pass
    except OSError as exc:
        return {"dump": dump, "error": "cannot create trigger {}: {}".format(trigger, exc)}
    return {"dump": dump, "error": None}


def _torch_dump_file(env, rank):
    """A dump PyTorch wrote itself (NCCL watchdog timeout) under TORCH_FR_DUMP_TEMP_FILE."""
    for name in ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"):
        prefix = env.get(name)
        if prefix and rank is not None and os.path.isfile("{}{}".format(prefix, rank)):
            return "{}{}".format(prefix, rank)
    if rank is not None and os.path.isfile("/tmp/nccl_trace_rank_{}".format(rank)):
        return "/tmp/nccl_trace_rank_{}".format(rank)
    return None


def fr_collect(requests, entries_by_pid, envs, clock, wait_s):
    """Wait (bounded) for requested dumps; attach each to its rank entry, raw text or base64."""
    import binascii

    until = min(time.monotonic() + wait_s, clock.deadline - FINISH_RESERVE_S - 0.3)
    pending = {pid: req for pid, req in requests.items() if req and not req["error"]}
    while pending and time.monotonic() < until:
        for pid in [p for p, req in pending.items() if os.path.exists(req["dump"])]:
            del pending[pid]
        if pending:
            time.sleep(0.1)
    for pid, entry in entries_by_pid.items():
        req = requests.get(pid)
        result = None
        if req is not None and req["error"]:
            result = {"status": "error", "message": req["error"]}
        elif req is not None and pid not in pending:
            data = _read(req["dump"], binary=True) or b""
            result = {"status": "ok", "format": "json", "source": req["dump"],
                      "text": data[:FR_DUMP_MAX_BYTES].decode("utf-8", "replace")}
        elif req is not None:
            result = {"status": "timeout",
                      "message": "hooked process did not write its dump in time"}
        else:
            path = _torch_dump_file(envs[pid], entry["rank"])
            if path:
                data = _read(path, binary=True) or b""
                result = {"status": "ok", "format": "pickle", "source": path,
                          "base64": binascii.b2a_base64(data[:FR_DUMP_MAX_BYTES], newline=False).decode()}
            else:
                result = {"status": "not_hooked",
                          "message": "no slurmdiag.torch hook and no PyTorch dump file"}
        entry["flight_recorder"] = result


def _enter_phase(status, phase):
    """Record how long the previous phase took (doc["timings"]), then start ``phase``."""
    now = time.monotonic()
    timings = status.setdefault("timings", {})
    if "since" in status:
        timings[status["phase"]] = round(now - status["since"], 3)
    status["phase"], status["since"] = phase, now


def collect(args, clock, doc, status):
    """Fill ``doc`` in place (so the watchdog can emit a partial one)."""
    errors = doc["errors"]
    node = doc["node"]
    job_id = str(args.get("job_id") or "")
    samples = max(0, int(args.get("samples", 3)))
    interval = max(0.0, float(args.get("interval", 1.0)))
    native = bool(args.get("native", False))
    strace_s = max(0.0, float(args.get("strace_s", 2.0)))
    concurrency = max(1, int(args.get("concurrency", 8)))
    exclude = {int(p) for p in args.get("exclude_pids") or () if str(p).isdigit()}
    if not job_id:
        errors.append("no job_id given")
        return

    tools = doc["tools"]
    tools["py-spy"] = find_tool("py-spy", _arg_list(args.get("pyspy")))
    tools["strace"] = find_tool("strace", _arg_list(args.get("strace")))
    tools["nvidia-smi"] = find_tool("nvidia-smi", _arg_list(args.get("nvidia_smi")))
    scontrol = find_tool("scontrol", [])
    ip_tool = find_tool("ip", ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"])

    # GPUs and NICs need no ptrace: gather them on the side while the stacks are sampled.
    import threading

    side = {}

    def side_work():
        try:
            side["gpu"] = collect_gpus(tools["nvidia-smi"], clock)
        except Exception as exc:  # noqa: BLE001 - GPUs must not cost the stacks
            side["gpu"] = {"status": "error", "message": f"collector bug: {exc!r}"}
        try:
            side["nics"] = collect_nics(ip_tool, clock)
        except Exception as exc:  # noqa: BLE001 - nor NICs
            side["nics"] = {"interfaces": [], "ib_ports": [], "message": f"collector bug: {exc!r}"}

    side_thread = threading.Thread(target=side_work, daemon=True)
    side_thread.start()

    _enter_phase(status, "discovery")
    procs, method = discover(job_id, node, scontrol, exclude, clock, errors)
    doc["discovery"] = method
    classify(procs)
    tick = float(os.sysconf("SC_CLK_TCK"))
    page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
    kept = [p for p in procs.values() if p["role"] is not None]
    order = {"rank": 0, "dataloader_worker": 1, "child": 1, "agent": 2}
    kept.sort(
        key=lambda p: (
            order[p["role"]],
            _as_int(p["global_rank"]) is None,
            _as_int(p["global_rank"]) or 0,
            p["pid"],
        )
    )
    entries = []
    window_start = {}  # pid -> (monotonic time, CPU ticks, starttime against pid reuse)
    unsampled = set()
    for info in kept:
        env = info["env"]
        source = procs[info["rank_pid"]] if info["rank_pid"] else info
        role = info["role"]
        identity = role != "agent"  # an agent's SLURM_PROCID numbers nodes, not ranks
        entry = {
            "pid": info["pid"],
            "ppid": info["stat"]["ppid"],
            "role": role,
            "rank_pid": info["rank_pid"],
            "rank": _as_int(source["global_rank"]) if identity else None,
            "local_rank": _as_int(_first(source["env"], LOCAL_RANK_VARS)) if identity else None,
            "world_size": _as_int(_first(source["env"], WORLD_SIZE_VARS)) if identity else None,
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
        window_start[info["pid"]] = (
            time.monotonic(),
            info["stat"]["ticks"],
            info["stat"]["starttime"],
        )
        entries.append(entry)
        if role != "rank" and not _is_python(info):
            unsampled.add(info["pid"])
            entry["errors"].append("not a Python process: no stack samples")
    doc["processes"] = entries
    ranks = [e for e in entries if e["role"] == "rank"]
    workers = [
        e
        for e in entries
        if e["role"] in ("dataloader_worker", "child") and e["pid"] not in unsampled
    ]
    if not ranks:
        errors.append(f"no rank processes of job {job_id} found on {node}")

    # Flight Recorder: ask hooked ranks first, so they dump while the stacks are sampled.
    fr_requests = {}
    rank_envs = {info["pid"]: info["env"] for info in kept if info["role"] == "rank"}
    if args.get("flight_recorder") and ranks:
        for entry in ranks:
            fr_requests[entry["pid"]] = fr_request(entry["pid"], rank_envs[entry["pid"]])

    # Stack samples: K rounds `interval` apart; workers only in the first round.
    _enter_phase(status, "py-spy sampling")
    pyspy = tools["py-spy"]
    if not pyspy and samples and ranks:
        errors.append("py-spy not found: no stacks (install py-spy or pass its path)")
    elif ranks or workers:
        first_round_at = time.monotonic()
        round_cost = 0.3
        done = 0
        for k in range(samples):
            due = first_round_at + k * interval
            if due + round_cost > clock.deadline - FINISH_RESERVE_S:
                errors.append(
                    f"skipped samples {k + 1}-{samples} of {samples}: they would end after "
                    f"deadline_s {clock.deadline - clock.t0:.1f}"
                )
                break
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            targets = ranks + (workers if k == 0 else [])
            began = time.monotonic()
            results = parallel(
                lambda e: dump_stack(pyspy, e["pid"], native, clock), targets, concurrency
            )
            round_cost = max(round_cost * 0.5, time.monotonic() - began)
            for entry, result in zip(targets, results):
                if isinstance(result, Exception):
                    result = {
                        "t": round(time.time() - clock.started, 3),
                        "threads": None,
                        "error": f"collector bug: {result!r}",
                    }
                entry["samples"].append(result)
                if entry["role"] == "child" and _in_dataloader_loop(result["threads"]):
                    entry["role"] = "dataloader_worker"  # a fork: same cmdline as its rank
            done += 1
        if done and ranks and all(s["threads"] is None for e in ranks for s in e["samples"]):
            errors.append("py-spy produced no stack for any rank")

    # Process state and CPU over the sampling window.
    _enter_phase(status, "process state")
    for entry in entries:
        stat = read_stat(entry["pid"])
        begun, ticks, starttime = window_start[entry["pid"]]
        if stat is None or stat["starttime"] != starttime:
            entry["errors"].append("process exited during collection")
            continue
        window = time.monotonic() - begun
        entry["state"] = stat["state"]
        entry["num_threads"] = stat["num_threads"]
        entry["rss_kb"] = stat["rss_pages"] * page_kb
        entry["cpu_window_s"] = round(window, 3)
        if window > 0.05:
            entry["cpu_percent"] = round((stat["ticks"] - ticks) / tick / window * 100.0, 1)
        wchan = _read("/proc/{}/wchan".format(entry["pid"]))
        entry["wchan"] = wchan.strip() if wchan and wchan.strip() not in ("", "0") else None

    # strace after py-spy: both use ptrace.
    _enter_phase(status, "strace")
    if strace_s > 0 and ranks:
        window = strace_s
        left = clock.left() - 0.6  # attach, SIGINT, table
        message = None
        if not tools["strace"]:
            window, message = 0.0, "strace not found"
        elif left < min(0.5, strace_s):
            window, message = 0.0, "skipped: deadline too close"
        elif left < strace_s:
            window = round(left, 2)
            message = f"window shortened from {strace_s:.1f} s to {window:.1f} s: deadline"
        if window <= 0:
            for entry in ranks:
                entry["strace"] = {
                    "status": "skipped",
                    "message": message,
                    "window_s": 0.0,
                    "text": "",
                }
            errors.append("strace " + message)
        else:
            if message:
                errors.append("strace " + message)
            results = parallel(
                lambda e: trace_syscalls(tools["strace"], e["pid"], window, clock),
                ranks,
                len(ranks),
            )
            for entry, result in zip(ranks, results):
                if isinstance(result, Exception):
                    result = {
                        "status": "error",
                        "message": f"collector bug: {result!r}",
                        "window_s": 0.0,
                        "text": "",
                    }
                if message and result["status"] == "ok":
                    result["message"] = message
                entry["strace"] = result

    if args.get("flight_recorder") and ranks:
        _enter_phase(status, "flight recorder")
        fr_collect(
            fr_requests,
            {e["pid"]: e for e in ranks},
            rank_envs,
            clock,
            float(args.get("fr_wait_s", 10.0)),
        )

    _enter_phase(status, "gpu and nic collection")
    side_thread.join(max(0.0, clock.left()))
    if side_thread.is_alive():
        errors.append("GPU/NIC collection did not finish before the deadline")
    doc["gpu"] = side.get("gpu") or {
        "status": "error",
        "message": "nvidia-smi did not finish before the deadline",
        "query_gpu": None,
        "compute_apps": None,
        "qx": None,
        "xid_lines": [],
    }
    doc["nics"] = side.get("nics") or {
        "interfaces": [],
        "ib_ports": [],
        "message": "not collected before the deadline",
    }

    _enter_phase(status, "sockets")
    addr_to_if = {}
    for item in doc["nics"].get("interfaces") or ():
        for cidr in item.get("addresses") or ():
            addr_to_if.setdefault(cidr.split("/")[0], item["name"])
    tables = {}
    for entry in entries:
        if entry["role"] in ("rank", "agent"):
            found = connections(entry["pid"], tables, addr_to_if)
            if found is None:
                entry["errors"].append("cannot read /proc/{}/fd".format(entry["pid"]))
            else:
                entry["connections"] = found

    _enter_phase(status, "done")
    doc["timings"] = status["timings"]


def main(argv):
    clock = Clock(25.0)
    pid = os.getpid()
    args, problem = {}, None
    try:
        args = json.loads(argv[1]) if len(argv) > 1 else {}
        if not isinstance(args, dict):
            args, problem = {}, "arguments are not a JSON object"
    except ValueError as exc:
        problem = f"arguments are not JSON: {exc}"
    try:
        deadline_s = float(args.get("deadline_s", 25.0))
    except (TypeError, ValueError):
        deadline_s = 25.0
    clock.deadline = clock.t0 + max(deadline_s, 1.0)
    node = str(
        args.get("node") or os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    )
    node = "_".join(node.split()) or "unknown"
    _write_line(f"@SDG1-HELLO {node} {pid}\n")

    doc = {
        "format": FORMAT,
        "node": node,
        "hostname": os.uname().nodename,
        "python": "{}.{}.{}".format(*sys.version_info[:3]),
        "collector_version": COLLECTOR_VERSION,
        "started": clock.started,
        "duration_s": None,
        "discovery": None,
        "tools": {"py-spy": None, "strace": None, "nvidia-smi": None},
        "errors": [problem] if problem else [],
        "processes": [],
        "gpu": None,
        "nics": None,
    }
    emitter = Emitter(node)
    status = {"phase": "start", "since": time.monotonic()}

    def emit_partial(reason, wait):
        def note():
            doc["errors"].append(
                "{} during {}; document is partial".format(reason, status["phase"])
            )
            doc["duration_s"] = round(clock.elapsed(), 3)
            _kill_live_tools()

        if not emitter.emit(doc, wait=wait, before=note) and not emitter.done:
            return  # the main thread is writing the document right now: let it finish
        os._exit(0)

    import signal
    import threading

    watchdog = threading.Timer(
        max(0.0, clock.deadline - WATCHDOG_MARGIN_S - time.monotonic()),
        emit_partial,
        args=("deadline reached", 2.0),
    )
    watchdog.daemon = True
    watchdog.start()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: emit_partial(f"signal {signum} received", 0))

    try:
        collect(args, clock, doc, status)
    except Exception as exc:  # noqa: BLE001 - the document is the only way out: report, never crash
        import traceback

        doc["errors"].append(
            "collector failed in {}: {}".format(
                status["phase"], "".join(traceback.format_exception_only(type(exc), exc)).strip()
            )
        )
        _kill_live_tools()
    watchdog.cancel()
    doc["duration_s"] = round(clock.elapsed(), 3)
    emitter.emit(doc)
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    # Threads still waiting on a stuck tool (nvidia-smi in D state) must not hold the exit.
    os._exit(code)

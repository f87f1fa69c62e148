"""Finding the job's processes on this node, and what each one is (rank, worker, agent).

Below the job's slurmstepd in /proc (the sibling walk from our own step's stepd, else a walk of
/proc), else ``scontrol listpids``, else the environ of every process; then the classification:
ranks from their environment, DataLoader workers and other children, launchers (torchrun, srun).
"""

import posix as os

from .procfs import _ascii_digits, _read, parse_environ, read_cmdline, read_stat
from .tools import MARKER_ENV, _basename, _environ, _isdir, _one_line

# The sibling walk (sibling_stepd_descendants) compares its cost with a /proc walk's past this.
CHILDREN_READS_BEFORE_BUDGET = 256

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
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")
WORLD_SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS")
# The flags a home-grown launcher hands each rank its identity with (python train.py --rank 3
# --world-size 8): read from the command line of processes started as a group by one parent,
# after the launchers' own variables and before Slurm's (which a child inherits from the srun
# task that runs the launcher: the node's task number, the same for every rank of the node).
ARGV_IDENTITY = (
    ("rank", ("--rank", "--global-rank", "--global_rank")),
    ("local_rank", ("--local-rank", "--local_rank")),
    ("world_size", ("--world-size", "--world_size")),
)


def argv_identity(cmdline):
    """{"rank", "local_rank", "world_size"} given as flags on ``cmdline`` (only those there)."""
    out = {}
    args = list(cmdline[1:])
    for index, arg in enumerate(args):
        flag, equals, value = arg.partition("=")
        if not equals:
            value = args[index + 1] if index + 1 < len(args) else None
        for key, flags in ARGV_IDENTITY:
            number = _as_int(value) if flag in flags and key not in out else None
            if number is not None and number >= 0:
                out[key] = number
    return out


def _mark_argv_ranks(procs):
    """``argv`` of each Python process that is one of two or more children of one parent whose
    command lines give distinct ranks, the parent a launcher (one or two threads: a torch rank
    runs more): their identity from the flags. A Python child that exited unreaped (a zombie:
    its command line gone) counts among the children: a rank that died before its launcher
    waited for it leaves one live sibling. A single child given a rank (an evaluation
    script run by rank 0 with --rank 0), or helpers a rank starts numbered so, are not."""
    groups = {}  # type: dict
    dead = _dead_python_children(procs)
    for info in procs.values():
        info["argv"] = None
        if info.get("zombie"):  # a Python child that exited, its command line gone
            continue
        found = argv_identity(info["cmdline"])
        if "rank" in found and _is_python(info):
            groups.setdefault(info["stat"]["ppid"], []).append((info, found))
    for parent, members in groups.items():
        if parent in procs and procs[parent]["stat"]["num_threads"] > 2:
            continue
        distinct = len({found["rank"] for _, found in members}) == len(members)
        if len(members) + dead.get(parent, 0) >= 2 and distinct:
            for info, found in members:
                info["argv"] = found


def _dead_python_children(procs):
    """{parent pid: its Python children that exited unreaped (zombies its stepd listed)}."""
    dead = {}  # type: dict
    for info in procs.values():
        if info.get("zombie") and info["stat"]["comm"].startswith("python"):
            dead[info["stat"]["ppid"]] = dead.get(info["stat"]["ppid"], 0) + 1
    return dead


def _script_of(cmdline):
    """The script's file name (``train.py``) or ``-m module`` a Python command line runs, else
    None: what a process that runs its own command line again runs."""
    args = cmdline[1:]
    for index, arg in enumerate(args):
        if arg == "-m" and index + 1 < len(args):
            return "-m " + args[index + 1]
        if arg == "-c":
            return None
        if not arg.startswith("-"):
            return _basename(arg)
    return None


def _mark_relaunched_ranks(procs):
    """A process that is local rank 0 and runs its own script again for its node's local ranks
    1..n-1, their LOCAL_RANK in their environment and no RANK (PyTorch Lightning's subprocess
    script launcher, when Slurm did not start a task per device): the children are ranks, not
    its helpers, and it is a rank too (more threads than a launcher's one or two), not their
    launcher (``relaunches``). Their identity
    (``argv``): NODE_RANK (else the task's SLURM_PROCID) x n + LOCAL_RANK, inferred and said so.
    Children numbered from 0 are a launcher's (``_mark_env_ranks``); a child that runs
    another script (an evaluation given LOCAL_RANK), or inherited its parent's LOCAL_RANK (a
    fork, the script run again for another purpose), is not such a rank."""
    groups = {}  # type: dict
    for info in procs.values():
        parent = procs.get(info["stat"]["ppid"])
        local = _as_int(info["env"].get("LOCAL_RANK"))
        if (info.get("argv") is None and not info.get("zombie") and parent is not None
                and local is not None and local >= 0 and "RANK" not in info["env"]
                and "LOCAL_RANK" not in parent["env"] and "RANK" not in parent["env"]
                and _is_python(info) and _is_python(parent) and not _looks_multiprocessing(info)):
            script = _script_of(info["cmdline"])
            if script is not None and script == _script_of(parent["cmdline"]):
                groups.setdefault(parent["pid"], []).append((info, local))
    for parent_pid, members in groups.items():
        parent = procs[parent_pid]
        count = len(members) + 1  # with the parent, local rank 0
        # a rank runs more than a launcher's one or two threads
        if {local for _, local in members} != set(range(1, count)) or (
                parent["stat"]["num_threads"] <= 2):
            continue
        nodes = {_as_int(info["env"].get("NODE_RANK", info["env"].get("GROUP_RANK")))
                 for info, _ in members}
        node = nodes.pop() if len(nodes) == 1 else None
        where = "its NODE_RANK"
        if node is None:
            node, where = _as_int(parent["env"].get("SLURM_PROCID")), "its task's SLURM_PROCID"
        if node is None:
            continue
        worlds = {_as_int(info["env"].get("WORLD_SIZE")) for info, _ in members}
        world = worlds.pop() if len(worlds) == 1 else None
        tasks = _as_int(parent["env"].get("SLURM_NTASKS"))
        if world is None and tasks is not None:
            world = tasks * count
        parent["relaunches"] = True
        for info, local in [(parent, 0)] + members:
            rank = node * count + local
            info["argv"] = {"rank": rank, "local_rank": local}
            if world is not None:
                info["argv"]["world_size"] = world
            info["inferred"] = (
                f"rank {rank} inferred as {where} ({node}) x {count} processes + its local rank "
                f"({local}): the task's process runs its own script again for its node's other "
                "ranks, none of them has RANK in its environment")


def _mark_env_ranks(procs):
    """Python children of one launcher (one or two threads) that it started with LOCAL_RANK in
    their environment, distinct between them, and no RANK: ranks of a home-grown launcher
    (``Popen([python, "train.py"], env={..., "LOCAL_RANK": i})``), which inherit its task's
    SLURM_PROCID. Their identity (``argv``): the launcher's task x the children + LOCAL_RANK,
    inferred and said so (``inferred``). A fork or a multiprocessing child inherits its parent's
    environment, its LOCAL_RANK the same: not such a child."""
    groups = {}  # type: dict
    dead = _dead_python_children(procs)
    for info in procs.values():
        parent = procs.get(info["stat"]["ppid"])
        local = _as_int(info["env"].get("LOCAL_RANK"))
        if (info.get("argv") is None and not info.get("zombie") and parent is not None
                and local is not None and local >= 0 and "RANK" not in info["env"]
                and info["env"].get("LOCAL_RANK") != parent["env"].get("LOCAL_RANK")
                and _is_python(info) and not _looks_multiprocessing(info)):
            groups.setdefault(parent["pid"], []).append((info, local))
    for parent_pid, members in groups.items():
        parent = procs[parent_pid]
        locals_ = {local for _, local in members}
        count = len(members) + dead.get(parent_pid, 0)
        task = _as_int(parent["env"].get("SLURM_PROCID"))
        tasks = _as_int(parent["env"].get("SLURM_NTASKS"))
        if (parent["stat"]["num_threads"] > 2 or count < 2 or len(locals_) != len(members)
                or task is None):
            continue
        for info, local in members:
            rank = task * count + local
            info["argv"] = {"rank": rank, "local_rank": local}
            if tasks is not None:
                info["argv"]["world_size"] = tasks * count
            info["inferred"] = (
                f"rank {rank} inferred as its launcher's task ({task}) x {count} processes + "
                f"its LOCAL_RANK ({local}): no RANK in its environment")


def identity(info):
    """(rank, local rank, world size) of a process as text, None where unknown: the launchers'
    variables, then the flags of a launcher's ranks (``argv``), then Slurm's."""
    env, argv = info["env"], info.get("argv") or {}
    out = []
    for names, key in ((RANK_VARS, "rank"), (LOCAL_RANK_VARS, "local_rank"),
                       (WORLD_SIZE_VARS, "world_size")):
        value = _first(env, names[:-1])
        if value is None and key in argv:
            value = str(argv[key])
        if value is None:
            value = _first(env, names[-1:])
        out.append(value)
    return tuple(out)


def parse_listpids(text):
    """Rows of ``scontrol listpids``: [(pid, step_id or None)]; pids of -1 are dropped."""
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3 or not _ascii_digits(parts[0].lstrip("-")):
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


def _node_needle(node, cluster=None):
    """What _environ_node looks for: this node's SLURMD_NODENAME and, when known, the cluster's
    SLURM_CLUSTER_NAME (ours, from the step's environment, when not given)."""
    if cluster is None:
        cluster = _environ().get("SLURM_CLUSTER_NAME")
    return tuple(
        None if value is None else ("\0" + var + "=" + value + "\0").encode("utf-8", "surrogateescape")
        for var, value in (("SLURMD_NODENAME", node), ("SLURM_CLUSTER_NAME", cluster or None))
    )


def _environ_node(data, needle):
    """Whose node raw environ bytes name: "ours", "foreign", or None (they name no node).

    Another cluster's process is foreign too: two emulated clusters on one host can share job
    ids and node names. No dict is built."""
    node, cluster = needle
    padded = b"\0" + data
    if cluster is not None and cluster not in padded and b"\0SLURM_CLUSTER_NAME=" in padded:
        return "foreign"
    if node in padded:
        return "ours"
    return "foreign" if b"\0SLURMD_NODENAME=" in padded else None


def _stepd_node(tasks, needle):
    """What the first readable of a stepd's tasks says of its node (see _environ_node)."""
    for task in tasks:
        data = _read(f"/proc/{task}/environ", binary=True, one_show=True)
        if data is not None:
            return _environ_node(data, needle)
    return None


def _is_foreign(step, tasks, needle, claimed):
    """True for a stepd of another node sharing this host (multiple slurmd, the emulated cluster).

    A node runs one stepd per step: once a task's environment has named this node for ``step``,
    it joins ``claimed``, and the walks skip the other stepds of that step unread. A stepd whose
    tasks name no node counts as ours and claims nothing.
    """
    whose = _stepd_node(tasks, needle)
    if whose == "ours":
        claimed.add(step)
    return whose == "foreign"


def _children(pid, main_only=False, counter=None):
    """Child pids of ``pid`` from /proc/PID/task/TID/children, None if that cannot be read.

    A child is listed under the thread that forked it, so all threads are read, unless
    ``main_only``. ``counter`` (a one-item list) counts the files read.
    """
    if main_only:
        tids = [str(pid)]
    else:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return None
    found = []  # type: list
    for tid in tids:
        data = _read(f"/proc/{pid}/task/{tid}/children", binary=True, one_show=True)
        if data is None:
            if main_only or _isdir(f"/proc/{pid}/task/{tid}"):
                return None  # gone, or no children files (a kernel without CONFIG_PROC_CHILDREN)
            continue  # that thread has just ended
        found.extend(int(child) for child in data.split())
    if counter is not None:
        counter[0] += len(tids)
    return found


def _proc_entries():
    return sum(1 for name in os.listdir("/proc") if name.isdigit())


def sibling_stepd_descendants(job_id, node, skip_step=None):
    """{pid: step} below this job's slurmstepd processes, from our own stepd's siblings.

    The collector is a task of our own step, so its parent is a slurmstepd; slurmd double-forks
    every stepd, so all stepds of this node share one parent, init or a subreaper. Its
    children (the host's daemons, a hundred or so), then each job stepd's and each task's
    children, are far fewer files than a walk of all /proc (kernel threads, every other
    process), the more so on a large node. A stepd's tasks are forked by its main thread, so one
    file tells whether a stepd is another (emulated) node's. None when this does not apply (no
    stepd parent: ssh, a wrapper), when no stepd of the job is there, or when the job's threads
    would cost more files than /proc has entries: the full walk then decides.
    """
    own = read_stat(os.getppid())
    if own is None or own["comm"] != "slurmstepd" or own["ppid"] < 1:
        return None
    counter = [0]
    candidates = _children(own["ppid"], counter=counter)
    if not candidates:
        return None
    prefix = f"slurmstepd: [{job_id}.".encode()
    needle = _node_needle(node)
    budget = None
    found = {}
    claimed = set()  # type: set
    seen_stepd = False
    for stepd in candidates:
        title = _read(f"/proc/{stepd}/cmdline", binary=True, one_show=True)
        if not title or not title.startswith(prefix):
            continue
        step = title[len(prefix) :].split(b"]", 1)[0].decode("utf-8", "replace")
        if step == skip_step:
            continue
        seen_stepd = True
        if step in claimed:
            continue  # this node's stepd of that step is found: another node's (see _is_foreign)
        tasks = _children(stepd, main_only=True, counter=counter) or _children(stepd, counter=counter)
        if tasks is None:
            return None
        if _is_foreign(step, tasks, needle, claimed):
            continue
        stack = [stepd]
        while stack:
            kids = _children(stack.pop(), counter=counter)
            if kids is None:
                return None
            for pid in kids:
                if pid not in found:
                    found[pid] = step
                    stack.append(pid)
            if counter[0] > CHILDREN_READS_BEFORE_BUDGET:
                if budget is None:
                    budget = _proc_entries()
                if counter[0] > budget:
                    return None  # many threads: one pass over /proc is cheaper
    return found if seen_stepd else None


def stepd_descendants(job_id, node, skip_step=None):
    """{pid: step} below this job's slurmstepd processes on ``node``, from /proc alone; None if none.

    slurmstepd titles itself ``slurmstepd: [JOB.STEP]``; every process of a step descends from
    its stepd. One pass over /proc/*/stat costs 2-3 ms here, where ``scontrol listpids`` costs
    ~17 ms of CPU (libslurm, slurm.conf, a slurmd round trip): a cost paid on every node.
    Where several slurmd share a host (multiple-slurmd setups, the emulated test cluster) the
    other nodes' stepds are visible too: the environ of one task of each stepd says its node,
    and a foreign stepd's subtree is dropped without reading any of its processes. So is
    ``skip_step``, our own step.
    """
    prefix = f"slurmstepd: [{job_id}."
    parent = {}
    stepds = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        data = _read(f"/proc/{name}/stat", one_show=True)
        if not data:
            continue
        close = data.rfind(")")
        fields = data[close + 2 :].split(None, 2)
        if len(fields) < 2 or not _ascii_digits(fields[1]):
            continue
        pid = int(name)
        parent[pid] = int(fields[1])
        if data[data.find("(") + 1 : close] == "slurmstepd":
            title = _read(f"/proc/{name}/cmdline", one_show=True) or ""
            if title.startswith(prefix):
                step = title[len(prefix) :].split("]", 1)[0]
                if step != skip_step:
                    stepds[pid] = step
    if not stepds:
        return None
    children = {}  # type: dict
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    needle = _node_needle(node)
    found = {}
    claimed = set()  # type: set
    for stepd, step in stepds.items():
        if step in claimed:
            continue  # this node's stepd of that step is found: another node's (see _is_foreign)
        tasks = children.get(stepd, ())
        if _is_foreign(step, tasks, needle, claimed):
            continue
        stack = list(tasks)
        while stack:
            pid = stack.pop()
            if pid not in found:
                found[pid] = step
                stack.extend(children.get(pid, ()))
    return found


def discover(job_id, node, listing, exclude, errors, walked=None):
    """Job processes on this node: ({pid: info}, method).

    ``listing`` is what ``scontrol listpids`` gave, (rc, out, err, note), or None without scontrol.
    """
    own_env = _environ()
    own_job = own_env.get("SLURM_JOB_ID") or own_env.get("SLURM_JOBID")
    own_step = own_env.get("SLURM_STEP_ID") or own_env.get("SLURM_STEPID")
    exclude = set(exclude)
    exclude.add(os.getpid())

    listed = None
    if walked is not None:
        listed = {pid: step for pid, step in walked.items() if not (
            own_step and own_job == job_id and step == own_step)}
    elif listing is not None:
        rc, out, err, note = listing
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

    method = "stepd" if walked is not None else "listpids" if listed is not None else "proc"
    if listed is not None:
        pids = listed
    else:
        # Over ssh, our shell and its parents carry the job's environment too (adopted sessions).
        exclude |= _own_lineage()
        pids = {}
        needles = [f"\0{var}={job_id}\0".encode() for var in ("SLURM_JOB_ID", "SLURM_JOBID")]
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            data = _read(f"/proc/{name}/environ", binary=True, one_show=True)
            # A cheap byte test; the parsed environ is checked again below.
            if data and any(needle in b"\0" + data for needle in needles):
                pids[int(name)] = None

    procs = {}
    needle = _node_needle(node)
    for pid in pids:
        if pid in exclude:
            continue
        raw = _read(f"/proc/{pid}/environ", binary=True, one_show=True)
        if raw is None and listed is not None:
            # A zombie (exited, not reaped) has no environment left: kept, marked, when its
            # stepd listed it, so that its launcher's children are counted whole (_mark_argv_ranks)
            stat = read_stat(pid)
            if stat is not None and stat["state"] == "Z":
                procs[pid] = {"pid": pid, "env": {}, "stat": stat, "cmdline": [],
                              "step_id": pids[pid], "zombie": True}
            continue
        if raw is None or _environ_node(raw, needle) == "foreign":
            continue  # gone, not ours to read, or another (emulated) node's process
        env = parse_environ(raw)
        stat = read_stat(pid)
        if stat is None:
            continue  # exited
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
            "@SDG1-HELLO" in arg or arg == "slurmdiag.collector"
            or arg.endswith("slurmdiag/collector/__main__.py") for arg in cmdline
        ):
            continue  # another slurmdiag collector attached to the same job
        procs[pid] = {"pid": pid, "env": env, "stat": stat, "cmdline": cmdline, "step_id": step}
    return procs, method


def _agent_kind(cmdline):
    """The launcher a process is, judged from its first arguments, or None."""
    head = cmdline[:4]
    bases = [_basename(arg) for arg in head]
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
    if info["cmdline"] and _basename(info["cmdline"][0]).startswith("python"):
        return True
    try:
        return "python" in _basename(os.readlink("/proc/{}/exe".format(info["pid"])))
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
    launchers = set()  # type: set
    _mark_argv_ranks(procs)
    _mark_relaunched_ranks(procs)
    _mark_env_ranks(procs)  # after the flags: a child they identify keeps their identity
    for _ in range(4):
        _classify_once(procs, launchers)
        found = set()
        for info in procs.values():
            if info["role"] == "rank":
                owner = next(
                    (a for a in _ancestors(procs, info["pid"]) if a["role"] == "rank"), None
                )
                if owner is not None and not owner.get("relaunches"):
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
        info["global_rank"] = identity(info)[0]
        if info["stat"]["comm"] in SKIP_COMMS or info.get("zombie"):
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
            ) and not _wrapped_by(rank, info, procs) and not info.get("argv"):
                info["rank_pid"] = rank["pid"]
                info["role"] = "dataloader_worker" if _looks_multiprocessing(info) else "child"
                continue
        if _is_python(info):
            info["role"] = "rank"


def _wrapped_by(parent, info, procs):
    """Is ``info`` the rank that a Python wrapper (``conda run``, a project's launch.py: one
    thread, the command run as its child) started, rather than a tool its rank runs? Its only
    Python child that is not a multiprocessing one, with another command line and more threads
    than the wrapper's one or two (a torch rank runs its thread pools and gloo's). A rank that
    runs a script as its child (an evaluation) has threads of its own, the script few."""
    if info["stat"]["ppid"] != parent["pid"] or _looks_multiprocessing(info):
        return False
    if not _is_python(info) or info["cmdline"] == parent["cmdline"]:
        return False
    threads = parent["stat"]["num_threads"]
    if threads > 2 or info["stat"]["num_threads"] <= threads:
        return False
    children = [p for p in procs.values() if p["stat"]["ppid"] == parent["pid"]
                and _is_python(p) and not _looks_multiprocessing(p)]
    return len(children) == 1


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
    if info.get("step_id") == "batch":
        return "batch"  # started by the batch script itself (python directly, a shell loop)
    if procid is not None:
        return "srun"
    return "unknown"

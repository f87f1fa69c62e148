"""Turn a snapshot into verdicts: which ranks, which line, what kind of hang, what to do next.

``diagnose(snapshot) -> Analysis`` is a pure function. The rules, in the order they apply:

1. Nothing to look at: no node results (``incomplete``) or no rank process (``no_ranks``).
2. ``progressing`` (info, and nothing else about a hang) when the stacks prove progress: some
   rank was seen on both sides of a collective boundary across its samples (in a collective in
   one sample, elsewhere or in another collective in another — a collective completed or was
   reached), or more ranks move than stay put, or — when every sample landed in the same phase —
   strace saw most traced ranks make network send/receive calls (a hung gloo rank makes none,
   only epoll_wait timeouts). A healthy slow job whose ranks alternate between compute/sleep and
   all_reduce lands here.
3. Otherwise each rank gets a status from its main-thread stacks over the samples: *waiting*
   (settled in a collective), *blocked* (settled outside collectives in data loading, I/O, a
   lock, sleep, or idle in a C call from user code; or in state D/T), *busy* (in user or
   library code and active, CPU >= 50 %, or moving), *dead* (zombie) and, from the world size,
   *missing* (no process although its node reported) or *unknown* (its node failed to report).
4. The culprits are the ranks that explain why the waiting ones wait, most specific first:
   ``missing_rank`` (dead or missing), ``straggler`` (blocked), ``spinning`` (busy; but
   ``slow_step``, info, when the busy ranks are fewer than the waiting ones, all in native code
   (active, without the GIL in most samples, on one line or moving) for less than LONG_STEP_S
   of samples, on nodes without GPUs: a compute step or an evaluation longer than the look is
   the same sight). If every
   known rank waits: one collective position -> ``all_waiting`` (the cause is below Python);
   several -> ``mismatched_collective``, where the minority is the culprit. Ranks py-spy could
   not read while all others wait in one collective are suspects (``straggler``, warning). When
   nobody waits in a collective: every rank at one place -> ``idle`` (info, sleeping) or
   ``all_waiting`` (warning: with NCCL a hung collective shows at the next sync point);
   otherwise ``straggler`` / ``spinning`` warnings.

Majority logic has no "first rank is right" bias: ranks are grouped by where they wait (op and
call path), the largest group is the reference, every other group is a culprit. When the largest
groups tie (2 ranks split 1:1, two nodes split 4:4) the first sign of TIE_RULES that one side
shows and the other does not decides, in this order: point-to-point (send/recv waits on one peer:
a deadlocked pair), a barrier or object collective (the usual extra call on a rank-gated
logging/eval/checkpoint path, D21/D23), not issued by the training machinery (DDP, FSDP,
DeepSpeed engine, autograd, optimizer issue the loop's usual collective), a user frame named like
such a path (save, checkpoint, eval, log, print, metric, ...), waiting in DDP's forward (its
buffer broadcast) where the other side is not (a backward skipped on a non-finite loss;
ddp_skipped_backward_pair: rank 0 was blamed before), holding global rank 0 (``if rank ==
0:`` is the classic gate). The verdict's evidence names the sign that decided. When no sign
tells them apart, every tied group is named and the summary says it could not tell which side
diverged.

With a single sample per rank a hang cannot be told from a slow step: hang verdicts are then
warnings. Ranks on nodes that failed to report are listed as unknown and lower confidence.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from slurmdiag.analysis.flight import flight_verdicts
from slurmdiag.analysis.gpu import gpu_findings
from slurmdiag.analysis.groups import WORLD, GroupView, read_groups
from slurmdiag.analysis.model import Analysis, RankView
from slurmdiag.analysis.nic import nic_findings, watchdog_disagreement, watchdog_findings
from slurmdiag.analysis.stacks import (
    BLOCKING_KINDS,
    PIPELINE_P2P,
    TRANSFER_CALLS,
    RankDigest,
    StackInfo,
    StackMerge,
    format_int_ranges,
    frame_site,
    function_site,
    is_user_file,
    job_code,
    library_path,
    main_thread,
    merge_stacks,
    program_ended,
    waits_for_a_signal,
)
from slurmdiag.analysis.steps import one_world, program_of, set_apart_note, worlds
from slurmdiag.hostlist import compress_hostlist
from slurmdiag.snapshot import (
    BlockedCall,
    FileLock,
    Frame,
    LogFinding,
    Node,
    Rank,
    RecentConnection,
    RecentTraffic,
    Sample,
    Snapshot,
    StalledConnection,
    ThreadStack,
    Verdict,
    WorkerProcess,
)
from slurmdiag.vocabulary import HANG_KINDS, NodeStatus, Severity, VerdictKind, severity_rank

__all__ = ["diagnose"]


NEXT_STEPS = {
    "caught_error": (
        "the error the rank caught is the cause: fix it (its traceback is in the job's log); "
        "and keep collectives out of error handlers: a barrier in `except` or `finally` waits "
        "for ranks that still train (end the process on an error, or abort the group: "
        "`dist.destroy_process_group()` without the barrier); TORCH_DISTRIBUTED_DEBUG=DETAIL "
        "names a collective mismatch as it happens"
    ),
    "mismatched_collective": (
        "keep the collective outside the rank-gated branch; gate only the side effect "
        "(compute the all_reduce on every rank, then `if rank == 0: log(value)`); run with "
        "TORCH_DISTRIBUTED_DEBUG=DETAIL to have PyTorch name the mismatch"
    ),
    "missing_rank": (
        "read the missing rank's own log for the crash (exception, NaN, OOM kill, segfault): "
        "its exit is the cause, the hang only the symptom; set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 "
        "so the group aborts near the failure instead of waiting for the timeout"
    ),
    "world_size": (
        "the ranks wait for a world larger than the job started: make the world size the "
        "launch's (WORLD_SIZE, or world_size= from SLURM_NTASKS, or torchrun's --nnodes x "
        "--nproc-per-node) and the job's tasks a node match the devices a node the script "
        "counts; no rank is at fault"
    ),
    "all_waiting": (
        "every rank waits in the same collective, so the cause is below Python: check the NIC "
        "and GPU findings, dump the Flight Recorder (TORCH_NCCL_TRACE_BUFFER_SIZE=2000, "
        "attach --flight-recorder) to see which rank's queue is behind, and rerun with "
        "NCCL_DEBUG=INFO: the node whose log stops first is the culprit"
    ),
    "stalled_link": (
        "the network path between these nodes loses what it carries: probe it (slurmdiag probe "
        "--nodes NODES --ifname IFACE, or slurmdiag probe JOBID), read the NICs' and the "
        "switch ports' error counters (ip -s link, ethtool -S, ibstat / perfquery), then drain "
        "the node the probe names and requeue the job"
    ),
    "rendezvous": (
        "the ranks cannot meet: check that MASTER_ADDR:MASTER_PORT (or the rendezvous endpoint) "
        "is an address of the job's first node and reachable from every node (firewall, "
        "interface), that every one of WORLD_SIZE ranks was started (one that died before "
        "init leaves the others here: see the job log), and that no other job holds the port"
    ),
    "progressing": (
        "not hung: the stacks move between samples; if it is too slow, profile a step "
        "(py-spy record, torch profiler) and compare ranks; attach again if the step counter stops"
    ),
    "spinning": (
        "the rank loops in its own code and never reaches the collective the others wait in: "
        "look in that function for a loop or retry whose exit depends on the rank or its data; "
        "the other ranks are only waiting for it"
    ),
    "compiling": (
        "attach again in a minute or two: a compile ends. A rank found compiling again in a "
        "later look recompiles: TORCH_LOGS=recompiles says which guard failed (a batch or "
        "sequence length that changes: torch._dynamo.mark_dynamic, or pad to a few sizes); a "
        "compile that never ends is the compiler's hang: py-spy dump the rank and its compile "
        "workers"
    ),
    "slow_step": (
        "attach again in a minute, or with a longer look (--samples 3 --interval 30): a rank "
        "still on that line is hung in native code (py-spy dump --native --pid PID shows the "
        "C++ frames); if the job's step counter moves, the step is only slow"
    ),
    "no_ranks": (
        "check that the job is still running (squeue) and that its processes are Python "
        "programs started by srun, torchrun, accelerate, deepspeed or mp.spawn; look at the "
        "nodes' other processes in the report and at the job log for why no rank started"
    ),
    "launcher_rendezvous": (
        "the launchers wait for each other before starting any rank: give every node the same "
        "--nnodes, --rdzv-id and --rdzv-endpoint (an address of the job's first node, reachable "
        "from all), launch one agent per node (srun --ntasks-per-node=1), and use --standalone "
        "only for a single node; the agent's rendezvous times out after --rdzv-conf "
        "join_timeout (900 s)"
    ),
    "launcher_not_started": (
        "the nodes named never started their launcher: their job step still runs the wrapper's "
        "command at the line named (a copy, a download, a container pull, an install); see why on "
        "that node (`ps -ef --forest` under its slurmstepd, the wrapper's own log) and let the "
        "wrapper time out or fail rather than wait; the other nodes' launchers wait for them in "
        "the rendezvous until --rdzv-conf join_timeout (900 s)"
    ),
    "staging_works": (
        "the wrapper's step before the training still works: look again in a few minutes; if "
        "it is still there, see what it copies or fetches on that node (its progress, the "
        "storage it reads) and bound it with a timeout that fails the task"
    ),
    "incomplete": (
        "look at the failed nodes' messages; attach again with a longer --timeout, or check the "
        "nodes directly (scontrol show node, ssh): a node that cannot answer may be the culprit"
    ),
}
# Collectives of start-up: waiting here means the process group never formed.
STARTUP_OPS = frozenset(
    {"init_process_group", "rendezvous", "_store_based_barrier", "new_group", "init_device_mesh"}
)
STRAGGLER_STEPS = {
    "before_training": (
        "the ranks named run another program than the others: most likely a step of their "
        "wrapper before the training (staging data, waiting for a download or a copy) that has "
        "not ended, while the others wait for them in init_process_group; see what that step "
        "waits for on their node, and bound it (a timeout that fails the task) rather than let "
        "the whole job wait until the rendezvous times out"
    ),
    "gil": (
        "the thread named holds the GIL inside a call that blocks (a C extension that does not "
        "release it, ctypes.PyDLL): `py-spy dump --native --pid PID` shows its C frames; release "
        "the GIL around the call, give it a timeout, or move it to a process"
    ),
    "queue_full": (
        "nothing takes from the queue the rank puts into: find its consumer (the thread or "
        "process that gets from it; py-spy dump --locals): it died (a thread's traceback is in "
        "the job's stderr) or it stalls; give put() a timeout, or stop the producer when the "
        "consumer dies"
    ),
    "thread_died": (
        "a thread of the job died (its traceback is in the job's log) and the rank waits for "
        "what it fed: fix its error, and make the main thread hear of it (a sentinel put into "
        "the queue from a finally, a concurrent.futures Future whose result() re-raises, or "
        "queue.get(timeout=...) with a liveness check)"
    ),
    "data_loading": (
        "look at this rank's DataLoader workers (py-spy dump their pids; a dead or deadlocked "
        "worker stalls the queue), reproduce with num_workers=0, and make every rank see the "
        "same number of batches (DistributedSampler, same drop_last)"
    ),
    "io": (
        "find what the rank reads or writes (strace -p PID, ls -l /proc/PID/fd): a hung "
        "filesystem or remote service; give the call a timeout or move it off the training path"
    ),
    "debugger": (
        "a breakpoint() or pdb.set_trace() left in the code stopped the rank at the debugger's "
        "prompt, which reads its standard input (srun forwards the terminal to the tasks, or "
        "nothing): answer it (`c`) where srun's input comes from, or scancel; remove the "
        "breakpoint (or guard it with the rank and an interactive check) before resubmitting"
    ),
    "connect": (
        "nothing answers the rank's connection request (SYN_SENT: a host down, a firewall that "
        "drops, a service whose accept queue is full): check the address from the rank's node "
        "(nc -vz HOST PORT, the service's own health), and give the client a connect timeout "
        "so that the job fails instead of hanging"
    ),
    "lock": (
        "find the thread that holds the lock (py-spy dump --locals, the rank's other threads); "
        "never hold a lock across a collective"
    ),
    "exit": (
        "the program has ended but its process has not: Python joins every non-daemon thread "
        "at exit, and the one named waits in the call shown: give that call a timeout, join "
        "the thread with a timeout before returning, or make it a daemon thread"
    ),
    "queue_feeder": (
        "a multiprocessing.Queue's feeder thread cannot flush what was put on the queue (its "
        "reader stopped or is gone), and Python's exit joins it: drain the queue before "
        "exiting (or call queue.cancel_join_thread() where losing the data is fine), and keep "
        "the reader alive until the sentinel is read"
    ),
    "thread": (
        "its main thread waits for another thread of the rank (a future, an event, a join), "
        "named in the summary with the call it sits in: find what that thread waits for "
        "(py-spy dump --pid PID shows every thread), give its call a timeout, and the main "
        "thread's wait one (future.result(timeout=...))"
    ),
    "sleep": (
        "the rank sleeps or polls while the others wait: bound the wait, or make every rank "
        "wait together (barrier after the rank-0-only work)"
    ),
    "poll": (
        "the rank polls for a condition that never comes true (a file, a flag, a port): find "
        "what the loop waits for, give it a deadline that raises, and let the others fail fast"
    ),
    "blocked": (
        "the rank is idle inside a call from its own code (C extension, subprocess, socket): "
        "py-spy dump --native on it shows where; give that call a timeout"
    ),
    "child": (
        "the rank waits for a child process it started (subprocess.run, os.system): look at "
        "what the child waits for (py-spy/strace on its pid, its lock files and pipes); give "
        "the call a timeout"
    ),
    "kernel": (
        "the process is in uninterruptible sleep in the kernel: usually a hung filesystem "
        "(NFS, Lustre, GPFS) or device; check dmesg and the mount on that node"
    ),
    "fuse": (
        "the rank's read or open waits for a FUSE file system whose server (gcsfuse, s3fs, "
        "mountpoint-s3, blobfuse, JuiceFS, sshfs) does not answer: check that server process, its "
        "log and its backend from that node (ls on the mount hangs too); until it answers or is "
        "killed, every process that touches the mount waits"
    ),
    "stopped": (
        "the process is stopped (SIGSTOP, a debugger or ^Z): resume it with kill -CONT PID"
    ),
    "pool": (
        "a Pool task whose worker process died never returns: multiprocessing.Pool does not "
        "notice a worker killed (by the kernel's OOM killer, a signal); check the node's kernel "
        "log and the job's memory (dmesg, sacct -o MaxRSS), py-spy dump the pool's workers; "
        "use concurrent.futures.ProcessPoolExecutor (it raises BrokenProcessPool) or "
        "map_async(...).get(timeout=...)"
    ),
    "traced": (
        "a debugger holds the process in a tracing stop (ptrace: gdb -p, an IDE's attach, a "
        "tool that never detached), named in the summary: detach it (quit it, or kill its "
        "pid); kill -CONT does not resume a traced process"
    ),
}
_BLOCK_PHRASES = {
    "data_loading": "blocked in data loading",
    "io": "blocked in I/O",
    "lock": "blocked on a lock",
    "sleep": "sleeping",
    "pool": "waiting for its multiprocessing pool's workers",
    "poll": "polling in a sleep loop (its line moves, its CPU does not)",
    "blocked": "idle in a call from its own code",
    "kernel": "in uninterruptible kernel sleep (state D)",
    "fuse": "waiting for a FUSE file system that does not answer (request_wait_answer)",
    "child": "waiting for a child process",
    "stopped": "stopped (state T)",
    "gil": "stopped on the GIL",
}

_WCHAN_HINTS = (
    # a FUSE request: interruptible until a signal or ptrace interrupts it, then state D
    ("request_wait_answer", "fuse"),
    ("nanosleep", "sleep"),
    ("hrtimer", "sleep"),
    ("futex", "lock"),
    ("select", "io"),
    ("poll", "io"),
    ("epoll", "io"),
    ("sk_wait", "io"),
    ("inet_csk_accept", "io"),
    ("unix_stream", "io"),
    ("pipe", "io"),
    ("wait_woken", "io"),
    ("tcp_", "io"),
    ("nfs", "io"),
    ("rpc_", "io"),
    ("io_schedule", "io"),
    ("wait_on_page", "io"),
    ("folio_wait", "io"),
    ("do_wait", "child"),
)
_STRACE_HINTS = {
    "clock_nanosleep": "sleep",
    "nanosleep": "sleep",
    "futex": "lock",
    "read": "io",
    "recvfrom": "io",
    "recvmsg": "io",
    "recv": "io",
    "poll": "io",
    "ppoll": "io",
    "select": "io",
    "pselect6": "io",
    "epoll_wait": "io",
    "epoll_pwait": "io",
    "accept": "io",
    "accept4": "io",
    "connect": "io",
    "wait4": "io",
    "pread64": "io",
    "write": "io",
}
# A function named like a side path: a word of its name (split at "_", "." and case changes)
# that begins like one of these; "log" only as a word of its own (log_metrics, LogWriter), not
# the start of logits, login or log_softmax's "log" before a math word.
_SIDE_STEMS = ("save", "checkpoint", "ckpt", "eval", "valid", "print", "report", "metric",
               "dump", "export", "summar")
_LOG_WORDS = frozenset({"log", "logs", "logger", "logging", "logged"})
_MATH_AFTER_LOG = frozenset({"softmax", "sigmoid", "prob", "probs", "likelihood", "sum",
                             "sumexp", "det", "space", "normal", "std", "var", "scale", "p"})
_WORD_RE = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+")


def _named_like_a_side_path(function: str) -> bool:
    words = [w.lower() for w in _WORD_RE.findall(function)]
    for index, word in enumerate(words):
        if word.startswith(_SIDE_STEMS):
            return True
        following = words[index + 1] if index + 1 < len(words) else ""
        if word in _LOG_WORDS and following not in _MATH_AFTER_LOG:
            return True
    return False


_LOOP_MACHINERY = (
    "torch/nn/parallel/distributed.py",
    "torch/distributed/fsdp/",
    "torch/distributed/_composable/",
    "torch/autograd/",
    "deepspeed/runtime/engine.py",
    "deepspeed/runtime/zero/",
    "torch/optim/",
    "_tensor.py",
)
BUSY_CPU_PERCENT = 50.0
# A busy rank seen on one line in native code for less than this is not called spinning: a
# compute step can last that long (the samples span 2 s by default).
LONG_STEP_S = 60.0
# Measured between samples: a thread parked in a wait uses 0 ticks and one that polls (sleep,
# check, sleep) well under 1 % of a core; one that computes gets its share of the cores, which
# on a crowded node is small (5-7 % measured for 4 computing ranks among ~30 busy processes on
# 2 cores), so the bar is low.
WORKING_CPU = 0.02
WORKING_IO_RATE = 1 << 20  # bytes/s read+written: a rank copying data, not one writing a log line
# bytes/s a child the rank waits for reads and writes to be copying (rsync --bwlimit=100 is
# 100 KB/s); a tool stuck in a retry loop writes a log line a second, a progress bar less
CHILD_IO_RATE = 64 << 10
# Network transfer syscalls: a hung gloo rank shows none (only epoll_wait timeouts), a rank
# whose collectives complete shows hundreds per second (writev/recvfrom for gloo).
TRANSFER_SYSCALLS = frozenset(
    {"sendmsg", "sendto", "sendmmsg", "writev", "recvfrom", "recvmsg", "recvmmsg", "send", "recv"}
)
# Send and receive calls in strace's window that make a rank "talking" when its connections were
# not read again then (an older collector): collectives complete by the hundred a second. When
# they were, one call will do if a connection to another rank carried data in the window: a
# pipeline's stages move an activation every second or so, a few calls each (healthy_pipeline_p2p
# and healthy_pipeline_schedule with --samples 1: 3-13 calls a rank in 2 s, every rank's
# connections moving data, taken for a hang while two stages computed). Its liar, a hang
# attached the moment it formed (its last collective's bytes in flight): no recorded hang of the
# corpus (344 artifacts of session 25's full run) has a rank with 1-7 calls and data on a
# connection to another rank in the window; they make none, or their data is not collectives'
# (a store polled, an upload: _collective_traffic; a side channel: _default_group_slept).
TRAFFIC_CALLS = 8


@dataclass(slots=True)
class _Status:
    digest: RankDigest
    status: str  # waiting | blocked | busy | moving | dead | unsampled
    kind: str
    site: str | None = None
    op: str | None = None
    position: tuple[object, ...] | None = None
    info: StackInfo | None = None
    group: str | None = None  # the process group of its collective, when read (groups.py)
    members: tuple[int, ...] = ()  # that group's ranks
    via: str | None = None  # waiting through another thread: "thread T; its main thread ..."
    ended: bool = False  # its main thread is past its program's end (program_ended)
    on_a_thread: bool = False  # waiting in a collective through another thread than main
    waits_for: int | None = None  # the rank it waits for, when known (a file lock's holder)
    through_thread: bool = False  # busy through another thread that computes (_thread_computes)

    @property
    def rank(self) -> int:
        return self.digest.rank


# ---------------------------------------------------------------------------------------------
# per-rank status


def _wchan_hint(wchan: str | None) -> str | None:
    if not wchan or wchan == "0":
        return None
    for needle, kind in _WCHAN_HINTS:
        if needle in wchan:
            return kind
    return None


def _strace_hint(digest: RankDigest) -> str | None:
    summary = digest.proc.strace
    if summary is None or summary.status != "ok" or not summary.syscalls:
        return None
    top = max(summary.syscalls, key=lambda s: (s.seconds, s.calls))
    return _STRACE_HINTS.get(top.syscall)


def _is_busy(digest: RankDigest) -> bool:
    measured = _measured_work(digest)
    if measured is not None:
        return measured
    cpu = digest.proc.cpu_percent
    strace = digest.proc.strace
    if (cpu is not None and cpu < WORKING_CPU * 100 and strace is not None
            and strace.status == "ok" and strace.window_s >= 1.0):
        # One sample, but the process' CPU was measured over the collection window, which holds
        # the strace window (>= 1 s): under the bar a computing rank clears even on a crowded
        # node. A poll loop caught awake (py-spy active, state R while it waits for a core)
        # does not compute.
        return False
    running = (digest.proc.state or "")[:1] == "R"  # on a crowded node a computing rank gets
    # a few percent of a core, but it stays runnable
    return digest.active or running or (cpu is not None and cpu >= BUSY_CPU_PERCENT)


def _main_thread_computes(digest: RankDigest) -> bool:
    """The main thread on a CPU: by its CPU time between samples (and the process' I/O), or,
    with one sample, py-spy saw it active or the kernel has it runnable (state R). The
    process' CPU is not asked: an NCCL rank's progress threads spin while its main thread
    waits."""
    measured = _measured_work(digest)
    if measured is not None:
        return measured
    return digest.active or (digest.proc.state or "")[:1] == "R"


#: The share of a core (%) a rank whose main thread waits must use over the look for another
#: thread of it to compute: a thread computing on a crowded node's core got 21-35 % in the
#: accuracy runs (many_threads, dead_reader_busy_sidecar: six jobs' ranks on two cores), 60-95 %
#: with fewer; a hung rank's background threads (gloo's loops, a health check ten times a
#: second) 0-2.4 %.
THREAD_WORKING_CPU_PERCENT = 10.0


def _thread_computes(digest: RankDigest) -> bool:
    """Another thread of the rank, in the job's own code, on a CPU: py-spy saw it active in the
    last sample, and the process used THREAD_WORKING_CPU_PERCENT of a core over the look (its
    main thread waits, so another thread did). A main thread waiting on a queue or an event for such a
    thread works through it (healthy_pipeline_slow_labels: labels decoded on a loader thread
    for 2.5 s each, the main thread in queue.get()); one whose producer died, with only a
    health thread's ticks beside it (pipeline_heartbeat_hang: 0-1.4 % CPU), stays blocked. Its
    liar: a thread spinning for ever in the job's code (a slow thread or a hang, cannot tell).
    When the first round's --locals found the threads that hold what the main thread waits on
    (_waited_holders: its queue or event, or the object whose method waits on it) and one of
    them is stuck in a call (_holder_stuck), only the holders count: a tokenizer that computes
    beside a fill thread stuck in a socket read is not what the main thread waits for
    (stalled_loader_busy_tokenizer). A holder asleep does not decide: a queue-depth monitor
    handed the queue beside a producer that reaches it as a global and computes
    (healthy_slow_loader_queue_monitor: a critical straggler with --strace 0 when holders
    decided alone). What makes it lie still: a producer asleep in a retry loop for ever,
    beside a thread that computes ("cannot tell" on a hang)."""
    threads = _computing_threads(digest)
    holders = _waited_holders(digest)
    if holders and _holder_stuck(digest, holders):
        return any(t.os_thread_id in holders for t in threads)
    return bool(threads)


#: A thread's innermost Python frame waiting for another thread (stdlib file, functions): the
#: collector's _THREAD_WAITS (slurmdiag/collector/stacks.py), kept equal by a unit test; not
#: imported, so that the controller's analysis does not load the collector's modules.
_THREAD_WAIT_FRAMES = (("queue.py", ("get", "put")),
                       ("threading.py", ("wait", "acquire", "wait_for")))


def _holder_stuck(digest: RankDigest, holders: frozenset[int]) -> bool:
    """A holder of what the main thread waits on sits in a blocked call on a descriptor (a
    receive, a read: the collector's blocked_calls) or in a wait for yet another thread (a
    queue, an event, a condition) in the last sample: a producer that is stuck, not one asleep
    between its rounds nor a monitor."""
    if any(call.tid in holders for call in digest.proc.blocked_calls):
        return True
    samples = [x for x in digest.proc.samples if x.threads]
    for thread in samples[-1].threads if samples else ():
        if thread.os_thread_id not in holders or thread.active:
            continue
        inner = next((f for f in thread.frames if not f.native), None)
        if inner is not None and any(inner.file.endswith("/" + file)
                                     and inner.function.rsplit(".", 1)[-1] in names
                                     for file, names in _THREAD_WAIT_FRAMES):
            return True
    return False


def _waited_sample(digest: RankDigest) -> Sample | None:
    """The sample that read what the main thread waits on (the first round's), or None."""
    return next((x for x in digest.proc.samples if x.waited is not None), None)


def _waited_holders(digest: RankDigest) -> frozenset[int]:
    """The OS ids of the threads whose locals hold what the main thread waits on (a queue, an
    event, or the object whose method waits on it), read in the first round (collector's
    waited_holders); empty when not read or none holds it."""
    waited = _waited_sample(digest)
    return frozenset(waited.waited_holders) if waited is not None else frozenset()


def _holder_evidence(s: _Status) -> str | None:
    """ "rank 2: its main thread waits on <Queue at 0x..>, held by thread shard-fill (its
    locals, py-spy --locals)" when the first round read what the main thread waits on and who
    holds it (_waited_holders)."""
    first = _waited_sample(s.digest)
    if first is None or s.kind not in ("data_loading", "lock"):
        return None
    names = {t.os_thread_id: t.name or str(t.thread_id) for x in s.digest.proc.samples
             for t in x.threads if t.os_thread_id is not None}
    held = sorted(names.get(tid, f"tid {tid}") for tid in first.waited_holders)
    by = (f"held by thread{'s' if len(held) > 1 else ''} {', '.join(held[:3])}" if held
          else "held by no other thread's locals (a global, or an object reached otherwise)")
    return f"rank {s.rank}: its main thread waits on {first.waited}, {by} (py-spy --locals)"


def _computing_threads(digest: RankDigest) -> list[ThreadStack]:
    """The threads of _thread_computes: other than the main one, in the job's own code, active
    in the last sample, the process at THREAD_WORKING_CPU_PERCENT of a core at least."""
    cpu = digest.proc.cpu_percent
    samples = [x for x in digest.proc.samples if x.threads]
    if cpu is None or cpu < THREAD_WORKING_CPU_PERCENT or not samples:
        return []
    main = main_thread(samples[-1], digest.proc.pid)
    return [
        t for t in samples[-1].threads
        if t.active and (main is None or t.thread_id != main.thread_id)
        and any(not f.native and is_user_file(f.file) for f in t.frames)
    ]


def _producer_computes(digest: RankDigest) -> str | None:
    """The repr of the queue or event the main thread waits on when a thread that computes
    (_computing_threads) holds it in its locals (the first round's py-spy --locals: a loader
    thread handed its queue), else None: the thread it waits for lives and works."""
    waited = _waited_sample(digest)
    holders = set(waited.waited_holders) if waited is not None else set()
    if holders and any(t.os_thread_id in holders for t in _computing_threads(digest)):
        return waited.waited if waited is not None else None
    return None


def _measured_work(digest: RankDigest) -> bool | None:
    """Did the rank work between its samples, by its main thread's CPU time and the process'
    I/O counters? None when the snapshot holds no such measurement (one sample, old collector).
    """
    if digest.cpu_fraction is None:
        return None
    return digest.cpu_fraction >= WORKING_CPU or (digest.io_rate or 0.0) >= WORKING_IO_RATE


# A main thread blocked in these ways waits on something of its own (a child process, the kernel's
# I/O, a stop signal), not on another of its threads.
_OWN_BLOCKS = frozenset({"child", "kernel", "fuse", "stopped", "pool"})


def _status(merge: StackMerge, digest: RankDigest) -> _Status:
    """The rank's status from its main thread, unless another thread decides it:

    - a thread holding the GIL in a blocked call while the main thread waits for it (wherever
      that is, even on its way back from a collective): blocked there (gil_held_native);
    - a main thread blocked (a join, a future, a queue) while another thread waits in a
      collective: the rank waits in that collective, through that thread (an asynchronous
      checkpoint writer in its barrier: async_checkpoint_skip)."""
    status = _main_status(merge, digest)
    # in every sample, and only for a main thread known as such (by its OS id or its name):
    # a torn stack or another thread taken for the main one has no <module> frame either
    if (digest.stack_ids and digest.main_rule in ("os_thread_id", "name")
            and all(program_ended(merge.table[i].frames) for i in set(digest.stack_ids))):
        status = _ended(status)
    if not status.ended and status.status == "blocked" and status.kind == "io" \
            and _moving_data(digest.proc) is not None:
        return replace(status, status="busy", kind="transfer")
    if not status.ended and status.status == "blocked" and _waits_for_thread(status) \
            and _thread_moving_data(digest.proc) is not None:
        # a main thread waiting on a thread (a future, a join) that moves data: a checkpoint
        # uploaded on a worker thread (rank0_upload_thread_barrier)
        return replace(status, status="busy", kind="transfer")
    if not status.ended and status.status == "blocked" and status.kind in ("io", "kernel", "fuse") \
            and digest.io_rate is None and _moves_storage(digest):
        return replace(status, status="busy", kind="storage")
    if not status.ended and status.status == "busy" and status.kind != "input" \
            and _moves_storage(digest) and not _computes_in_python(digest):
        return replace(status, kind="storage")
    holder = digest.gil_holder
    # A main thread called busy while another thread holds the GIL idle in every sample is
    # one asking for the GIL (_gil_holder: never seen running, or using under 2 % of a core,
    # or asleep on a futex): it wakes every switch interval to ask (2-3 % of a core measured
    # on a loaded node, and py-spy may catch it awake), and it cannot run Python meanwhile
    # (gil_held_native)
    gil_waiter = status.status == "busy" and status.kind not in (
        "transfer", "storage", "input", "child_transfer")
    if (holder is not None and (status.status in ("waiting", "blocked") or gil_waiter)
            and status.kind not in _OWN_BLOCKS):
        name, info = holder
        return _Status(digest, "blocked", "gil", info.site, None, None, info,
                       via=f"held by thread {name}, idle in a call there; its main thread "
                       f"stopped at {status.site}")
    side = digest.side_collective
    if status.status == "blocked" and side is None:
        return _request_in_flight(status)
    if status.status != "blocked" or side is None or status.kind in _OWN_BLOCKS:
        return status
    name, info = side
    return _Status(digest, "waiting", "collective", info.site, info.op, info.position, info,
                   via=f"thread {name}; its main thread {_where(status)}", on_a_thread=True)


def _ended(status: _Status) -> _Status:
    """A rank whose program has returned and that waits at interpreter exit: for its
    non-daemon threads (threading._shutdown, no frame of the job's own), its site is the
    first of them that is in the job's code; in an atexit handler, where the handler is."""
    side = status.digest.side_threads
    if status.info is not None and status.info.top_user_frame is None and side:
        return replace(status, ended=True, site=side[0][1])
    return replace(status, ended=True)


def _main_status(merge: StackMerge, digest: RankDigest) -> _Status:
    proc = digest.proc
    state = (proc.state or "").strip().upper()[:1]
    if state in ("Z", "X"):
        return _Status(digest, "dead", "zombie" if state == "Z" else "dead")
    if not digest.stack_ids:
        if _wchan_hint(proc.wchan) == "fuse":
            return _Status(digest, "blocked", "fuse")
        if state == "D":
            return _Status(digest, "blocked", "kernel")
        if state == "T":
            return _Status(digest, "blocked", "stopped")
        return _Status(digest, "unsampled", "unknown")
    table = merge.table
    info = table[digest.stack_ids[-1]]
    if not digest.settled:
        infos = [table[sid] for sid in set(digest.stack_ids)]
        if any(i.position is not None for i in infos):
            retried = _retried_startup(digest, [table[sid] for sid in digest.stack_ids])
            if retried is not None:
                return _Status(digest, "waiting", "collective", retried.site, retried.op,
                               retried.position, retried)
            # on both sides of a collective boundary: a collective completed or was reached
            return _Status(digest, "moving", "progress", info.site, info.op, None, info)
        cls = merge.classes[digest.class_index] if digest.class_index is not None else None
        site = cls.site if cls else info.site
        if _measured_work(digest) is False:
            # moving between lines yet using no CPU and no I/O: a sleep-poll loop, stuck
            kinds = {table[sid].kind for sid in digest.stack_ids} & BLOCKING_KINDS
            why = next(iter(sorted(kinds)), None) or _wchan_hint(proc.wchan) or "sleep"
            return _Status(digest, "blocked", "poll" if why == "sleep" else why, site, None,
                           None, info)
        return _Status(digest, "busy", info.kind, site, None, None, info)
    if digest.stationary and state == "T" and not _measured_work(digest):
        # stopped (a signal, or a debugger's tracing stop) wherever it is, a collective too:
        # its peers in that collective wait for it, and it cannot take part (stopped_in_collective)
        return _Status(digest, "blocked", "stopped", info.site, None, None, info)
    if info.kind == "collective":
        if info.op == "backward" and _main_thread_computes(digest):
            # autograd's backward waits in a collective only through DDP's or FSDP's hooks, idle
            # (ddp_skipped_backward); a main thread that computes there runs the backward pass
            # (a pipeline stage's: healthy_pipeline_schedule, one sample)
            return _Status(digest, "busy", "compute", info.site, None, None, info)
        return _Status(digest, "waiting", "collective", info.site, info.op, info.position, info)
    if info.kind in BLOCKING_KINDS:
        if _measured_work(digest):
            # its CPU or I/O advance: working (reading, writing, computing), not blocked
            return _Status(digest, "busy", info.kind, info.site, None, None, info)
        if info.kind == "data_loading" and _workers_running(proc):
            # waiting for DataLoader workers that compute: the rank works through them
            return _Status(digest, "busy", "input", info.site, None, None, info)
        if info.kind in ("data_loading", "lock") and not _in_pool(info) \
                and _thread_computes(digest):
            # waiting for a thread of its own that computes: the rank works through it
            return _Status(digest, "busy", "input", info.site, None, None, info,
                           through_thread=True)
        if info.kind == "lock" and _in_pool(info):
            # Pool.map & co: waiting for the pool's worker processes, not for a lock
            if _workers_running(proc, "child"):
                return _Status(digest, "busy", "input", info.site, None, None, info)
            return _Status(digest, "blocked", "pool", info.site, None, None, info)
        if info.kind == "lock" and _thread_waits_on_child(proc) \
                and _running(_waited_children(proc)):
            # waiting for its thread that waits for a child process that computes (a compiler
            # run from a thread pool: torch.compile's C++ builds, healthy_compile_warmup): the
            # rank works through it; an idle child leaves it blocked
            return _Status(digest, "busy", "input", info.site, None, None, info)
        # subprocess.run's wait is "I/O" by its frames; the kernel says it waits for a child
        # (waitpid), or subprocess's own frames do (communicate polls the child's pipes)
        kind = ("child" if _wchan_hint(proc.wchan) == "child" or _in_subprocess(info)
                else info.kind)
        if kind == "child" and _running(_waited_children(proc)):
            # waiting for a child process that computes (gzip, an evaluation script): the rank
            # works through it (rank0_archive_barrier); an idle child leaves it blocked
            return _Status(digest, "busy", "input", info.site, None, None, info)
        if kind == "child" and _children_moving_data(proc):
            # ... or that moves data (a copy tool uploading a checkpoint at a throttled rate:
            # rank0_upload_tool_barrier); a child idle on a quiet connection leaves it blocked
            return _Status(digest, "busy", "child_transfer", info.site, None, None, info)
        return _Status(digest, "blocked", kind, info.site, None, None, info)
    if _is_busy(digest):
        return _Status(digest, "busy", info.kind, info.site, None, None, info)
    hint = _wchan_hint(proc.wchan) or _strace_hint(digest)
    if state == "D" and hint != "fuse":
        hint = "kernel"
    return _Status(digest, "blocked", hint or "blocked", info.site, None, None, info)


def _retried_startup(digest: RankDigest, infos: list[StackInfo]) -> StackInfo | None:
    """The start-up op (init_process_group, a rendezvous) a rank moved in and out of during
    the look with no work between (no CPU, no I/O): its stacks only that op's and its own
    code's. A rendezvous left for the job's own code without reaching any other collective
    failed, and one entered from a sleep is tried again: a wrapper retrying the rendezvous
    (stale_port_retry_init: 6-s attempts, a 2-s back-off, for ever; the rank that left it was
    "progressing"). The rank waits in that op, as the ranks that stay in it do. What would make
    it lie: the last rank of a healthy start reaching the rendezvous from a sleep in the look's
    last sample, the others in it (it forms within milliseconds: a later sample shows them
    past it); a rank that computes before it (slow_start_rank) keeps moving."""
    placed = [i for i in infos if i.position is not None]
    if not placed or any(i.op not in STARTUP_OPS for i in placed):
        return None
    if any(i.position is None and i.kind == "collective" for i in infos):
        return None
    if _measured_work(digest) is not False:
        return None
    return placed[-1]


def _workers_running(proc: Rank, role: str = "dataloader_worker") -> list[WorkerProcess]:
    """The rank's DataLoader workers (or its children: ``role`` "child") on a CPU: runnable
    (state R), or at least WORKING_CPU of a core over the collection window."""
    return _running(w for w in proc.workers if w.role == role)


def _running(workers: Iterable[WorkerProcess]) -> list[WorkerProcess]:
    return [w for w in workers
            if (w.state or "")[:1] == "R" or (w.cpu_percent or 0.0) >= 100 * WORKING_CPU]


def _waited_children(proc: Rank) -> list[WorkerProcess]:
    """The children a rank waits for: the one its main thread's wait4 names (subprocess's
    waitpid), and what that one runs (a shell's tool: ``shell=True``, os.system); else every
    child (a wait for any child, or the pipes polled by communicate). A named process none of
    the children descends from is waited for alone: a sidecar child moving data (a metrics
    service) does not speak for it. Children read without ``via`` (an older collector) are
    all taken, as before."""
    children = [w for w in proc.workers if w.role == "child"]
    named = {c.target.partition(":")[2] for c in proc.blocked_calls
             if c.call == "wait4" and c.tid == proc.pid and c.target}
    if not named:
        return children
    waited = [w for w in children
              if str(w.pid) in named or any(str(pid) in named for pid in w.via or ())]
    if waited or any(w.via is None for w in children):
        return waited or children
    return []


def _children_moving_data(proc: Rank) -> list[WorkerProcess]:
    """The children the rank waits for (_waited_children) that move data: a connection that
    sent or received data in the collector's last CHILD_RECENT_MS (their ``recent_traffic``),
    or files and pipes read and written at CHILD_IO_RATE or more over the window (a copy
    tool writing a checkpoint to shared storage, throttled or slow: ``io_rate``)."""
    return [w for w in _waited_children(proc)
            if (w.recent_traffic is not None and w.recent_traffic.active)
            or (w.io_rate or 0) >= CHILD_IO_RATE]


def _in_subprocess(info: StackInfo) -> bool:
    """The stack waits inside subprocess's Popen (communicate, wait: run, call, check_output)
    for a child process: in waitpid, or polling the child's pipes (capture_output)."""
    return any(f.file.endswith("/subprocess.py") and f.function.startswith("Popen.")
               for f in info.frames if not f.native)


def _thread_waits_on_child(proc: Rank) -> bool:
    """A thread of the rank waits for a child process in its last sample: inside subprocess's
    Popen (communicate, wait)."""
    last = proc.samples[-1] if proc.samples else None
    return last is not None and any(
        f.file.endswith("/subprocess.py") and f.function.startswith("Popen.")
        for thread in last.threads for f in thread.frames if not f.native)


def _in_pool(info: StackInfo) -> bool:
    """The stack waits inside multiprocessing's Pool (map, apply, imap's next, a result's get):
    for the pool's worker processes (pool_worker_killed)."""
    return any(f.file.endswith("multiprocessing/pool.py") for f in info.frames if not f.native)


def _view(status: _Status) -> RankView:
    d = status.digest
    info = status.info
    return RankView(
        rank=d.rank,
        node=d.node,
        pid=d.proc.pid,
        state=d.proc.state,
        cpu_percent=d.proc.cpu_percent,
        top_user_frame=info.top_user_frame if info else None,
        top_frame=info.top_frame if info else None,
        kind=status.kind,
        stationary=d.stationary and bool(d.stack_ids),
        class_index=d.class_index,
        site=status.site,
        op=status.op,
        status=status.status,
        busy_threads=d.busy_threads,
    )


# ---------------------------------------------------------------------------------------------
# expected ranks


@dataclass(frozen=True)
class _Layout:
    world_size: int | None
    missing: tuple[int, ...]
    unknown: tuple[int, ...]
    failed_nodes: tuple[str, ...]
    notes: tuple[str, ...] = ()
    # the world the ranks asked init_process_group for, when larger than their launch's: the
    # ranks beyond the processes started were never started
    asked: int | None = None


def _asked_world(proc: Rank) -> int | None:
    """The world_size a rank gave init_process_group, read with its locals while it waits
    there (the collector keeps that local of that frame), else None."""
    sample, frames = _locals_sample(proc)
    for index, local, text in sample.groups if sample is not None else ():
        if (local == "world_size" and 0 <= index < len(frames) and text.isdigit()
                and frames[index].function.rsplit(".", 1)[-1] == "init_process_group"
                and frames[index].file.endswith("distributed_c10d.py")):
            return int(text)
    return None


def _expected_ranks(snapshot: Snapshot, merge: StackMerge) -> _Layout:
    present = {d.rank for d in merge.digests}
    sizes = Counter(p.world_size for _, p in snapshot.all_ranks() if p.world_size)
    notes: list[str] = []
    world: int | None = None
    asked: int | None = None
    if sizes:
        world = sizes.most_common(1)[0][0]
        if len(sizes) > 1:
            notes.append(f"ranks disagree on WORLD_SIZE: {dict(sorted(sizes.items()))}")
    elif (
        snapshot.job.ntasks
        and all(p.launcher in ("srun", "unknown") for _, p in snapshot.all_ranks())
        and present
        and max(present) < snapshot.job.ntasks
    ):
        world = snapshot.job.ntasks
    elif present:
        world = max(present) + 1  # a lower bound: every rank below the highest one exists
    # the ranks still in init_process_group that were read with their locals, one world asked
    calls = {_asked_world(d.proc) for d in merge.digests} - {None}
    wanted = int(next(iter(calls)) or 0) if len(calls) == 1 else 0
    if present and wanted > max(world or 0, max(present) + 1):
        notes.append(
            f"the ranks asked init_process_group for a world of {wanted} (its world_size); the "
            f"job started {len(present)} (ranks {format_int_ranges(sorted(present))}): ranks "
            f"{format_int_ranges(range(max(present) + 1, wanted))} were never started"
        )
        world = asked = wanted
    seen = {n.name for n in snapshot.nodes}
    failed = [n.name for n in snapshot.nodes if n.status != NodeStatus.OK]
    failed += [name for name in snapshot.job.nodes if name not in seen]
    if world is None:
        return _Layout(None, (), (), tuple(failed), tuple(notes))
    beyond = sorted(r for r in present if r >= world)
    if beyond:
        notes.append(f"ranks {format_int_ranges(beyond)} are beyond WORLD_SIZE={world}")
    absent = sorted(set(range(world)) - present)
    if not absent:
        return _Layout(world, (), (), tuple(failed), tuple(notes))
    if snapshot.job.het_job_id and snapshot.job.het_job_offset is not None:
        # One component of a heterogeneous job: a step across components has ranks elsewhere.
        notes.append(
            f"ranks {format_int_ranges(absent)} are not in component "
            f"{snapshot.job.het_job_id}+{snapshot.job.het_job_offset}; attach to the job's other "
            "components to see them"
        )
        return _Layout(world, (), tuple(absent), tuple(failed), tuple(notes))
    if not failed:
        return _Layout(world, tuple(absent), (), (), tuple(notes), asked)
    owner = _rank_owner(snapshot, world)
    missing = [r for r in absent if owner is not None and owner(r)]
    unknown = [r for r in absent if owner is None or not owner(r)]
    return _Layout(world, tuple(missing), tuple(unknown), tuple(failed), tuple(notes), asked)


def _rank_owner(snapshot: Snapshot, world: int):  # type: ignore[no-untyped-def]
    """A predicate "this absent rank belongs to a node that reported", when the layout shows it.

    Slurm places ranks in blocks (node i holds ranks i*k .. i*k+k-1) or cyclically (rank r on
    node r mod N). torchrun numbers nodes in rendezvous order, so the block of each reporting
    node is read from its own ranks rather than from its position in the node list.
    """
    n_nodes = len(snapshot.job.nodes) or len(snapshot.nodes)
    ok_nodes = [n for n in snapshot.nodes if n.status == NodeStatus.OK]
    if n_nodes == 0 or any(not any(p.rank is not None for p in n.ranks) for n in ok_nodes):
        return None
    node_ranks = [{p.rank for p in n.ranks if p.rank is not None} for n in ok_nodes]
    if world % n_nodes == 0:
        k = world // n_nodes
        blocks = [{r // k for r in ranks} for ranks in node_ranks]
        if all(len(b) == 1 for b in blocks) and len({min(b) for b in blocks}) == len(blocks):
            occupied = {min(b) for b in blocks}
            return lambda r: r // k in occupied
    residues = [{r % n_nodes for r in ranks} for ranks in node_ranks]
    if all(len(b) == 1 for b in residues) and len({min(b) for b in residues}) == len(residues):
        taken = {min(b) for b in residues}
        return lambda r: r % n_nodes in taken
    return None


# ---------------------------------------------------------------------------------------------
# wording helpers


def _ranks_label(ranks: Iterable[int]) -> str:
    values = sorted(ranks)
    word = "rank" if len(values) == 1 else "ranks"
    return f"{word} {format_int_ranges(values)}"


def _verb(ranks: Sequence[int], singular: str, plural: str) -> str:
    return singular if len(ranks) == 1 else plural


def _unique(items: Iterable[str | None]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(i for i in items if i))


def _group_by(statuses: Iterable[_Status], key) -> dict[object, list[_Status]]:  # type: ignore[no-untyped-def]
    groups: dict[object, list[_Status]] = {}
    for s in statuses:
        groups.setdefault(key(s), []).append(s)
    return groups


def _where(s: _Status) -> str:
    if s.ended and s.status in ("blocked", "busy"):
        return _exit_phrase(s)
    if s.status == "waiting":
        via = f" ({s.via})" if s.via else ""
        return f"{s.op}{f' on {s.group}' if s.group else ''} at {s.site}{via}"
    if s.status == "busy":
        return f"{'moving in' if not s.digest.stationary else 'busy at'} {s.site}"
    if s.status == "blocked":
        phrase = _BLOCK_PHRASES.get(s.kind, s.kind)
        if s.kind == "stopped" and _traced(s):
            phrase = _traced_phrase(s)
        if _joins_a_thread(s) and s.via:
            return f"in its thread {s.via}"
        if _waits_for_thread(s):
            phrase = "waiting for another thread"  # named by _waits_on_thread
        elif _full_queue(s):
            phrase = "blocked putting into a full queue (Queue.put)"
        elif _in_event_loop(s) and s.site:
            return (f"{phrase} in an asyncio event loop started at {s.site} (the coroutine it "
                    "awaits is on no thread's stack)")
        via = f" ({s.via})" if s.via else ""
        if s.kind == "sleep" and s.site:
            via += _library_loop(s)
        if s.kind == "io":
            via += _connect_phrase(s.digest.proc)
        debugger = _debugger(s)
        if debugger and s.site:
            return (f"stopped at a {debugger} prompt at {s.site} (the next line run after the "
                    "call that started it), reading its standard input")
        return f"{phrase} at {s.site}{via}" if s.site else phrase
    return s.kind


def _library_loop(s: _Status) -> str:
    """" in FileBaton.wait (torch/utils/file_baton.py)" for a rank asleep inside a library's
    function called from its site (a poll loop of the library's: stale_build_lock), else ""."""
    info = s.info
    if info is None or info.top_user_frame is None or not info.frames:
        return ""
    at = info.frames.index(info.top_user_frame)
    if at == 0:
        return ""
    called = info.frames[at - 1]
    if called.native or is_user_file(called.file):
        return ""
    return f" in {called.function} ({library_path(called.file)})"


def _in_event_loop(s: _Status) -> bool:
    """The main thread inside asyncio's event loop in its last sample: what it waits for is a
    suspended coroutine, which no thread's stack shows (asyncio_fetch_stuck)."""
    info = s.info
    frames = info.frames if info is not None else ()
    return any(f.function.endswith(("run_until_complete", "run_forever"))
               and f.file.endswith("asyncio/base_events.py") for f in frames)


#: A server's accept loop, (library file, function): the stdlib's socketserver (http.server,
#: xmlrpc.server, wsgiref, and werkzeug's, Flask's development server, on top of it),
#: werkzeug's own, uvicorn's, aiohttp's run_app and gRPC's wait_for_termination.
_SERVE_LOOPS = (
    ("/socketserver.py", "serve_forever"),
    ("werkzeug/serving.py", "serve_forever"),
    ("uvicorn/server.py", "serve"),
    ("uvicorn/server.py", "run"),
    ("aiohttp/web.py", "run_app"),
    ("grpc/_server.py", "wait_for_termination"),
)


def _serving(s: _Status) -> str | None:
    """``"serve_forever (socketserver.py)"`` for a rank whose main thread waits for clients in a
    server's accept loop (_SERVE_LOOPS) with no frame of the job's code inside it (a request
    handled on the main thread is not idle: server_shutdown_deadlock, a handler that calls
    its single-threaded server's shutdown()), no request's handler thread in flight through
    the look (_handlers_in_flight) and no other thread of it in a collective; else None."""
    frames = s.info.frames if s.info is not None else ()  # innermost first
    at = _serve_loop_at(frames)
    samples = [x for x in s.digest.proc.samples if x.threads]
    if at is None or not samples or _handlers_in_flight(s.digest) or _called_target(s):
        return None
    main = main_thread(samples[-1], s.digest.proc.pid)
    if any(f.file.endswith("distributed/distributed_c10d.py")
           for t in samples[-1].threads if main is None or t.thread_id != main.thread_id
           for f in t.frames):
        return None
    return f"{frames[at].function} ({library_path(frames[at].file)})"


def _serve_loop_at(frames: Sequence[Frame]) -> int | None:
    """The index of a server's accept loop (_SERVE_LOOPS) among ``frames`` (innermost first)
    when no frame of the job's code is inside it (idle, not handling a request), else None."""
    at = next((i for i, f in enumerate(frames)
               if not f.native and any(f.file.endswith(file)
                                       and f.function.rsplit(".", 1)[-1] == name
                                       for file, name in _SERVE_LOOPS)), None)
    if at is None or any(not f.native and is_user_file(f.file) for f in frames[:at]):
        return None
    return at


def _handlers_in_flight(digest: RankDigest) -> list[ThreadStack]:
    """The threads of the last sample other than main in a socketserver request's handling
    (``finish_request``) with a frame of the job's code, in every sample: requests that did
    not complete during the look."""
    samples = [x for x in digest.proc.samples if x.threads]
    if not samples:
        return []
    main = main_thread(samples[-1], digest.proc.pid)
    return [t for t in samples[-1].threads
            if (main is None or t.thread_id != main.thread_id) and _in_every_sample(t, samples)
            and any(f.file.endswith("/socketserver.py") and f.function.endswith("finish_request")
                    for f in t.frames)
            and any(not f.native and is_user_file(f.file) for f in t.frames)]


def _request_in_flight(status: _Status) -> _Status:
    """A rank blocked in its server's idle accept loop while a request's handler thread sits
    in the job's code through the look: where the rank is stuck is that handler's line
    (generation_server_request_stuck: a moderation call without timeout before the command's
    broadcast), the main thread's loop said in its via."""
    frames = status.info.frames if status.info is not None else ()
    if _serve_loop_at(frames) is None:
        return status
    handlers = _handlers_in_flight(status.digest)
    if not handlers:
        return status
    handler = handlers[0]
    user = next(f for f in handler.frames if not f.native and is_user_file(f.file))
    inner = next((f for f in handler.frames if not f.native), user)
    waits = f", waiting in {inner.function}" if inner is not user else ""
    return replace(status, site=frame_site(user),
                   via=f"request handler thread {handler.name or handler.thread_id} in "
                       f"{user.function}{waits}; its main thread serves requests at {status.site}")


def _in_every_sample(thread: ThreadStack, samples: Sequence[Sample]) -> bool:
    """The thread (by its id) is in every one of ``samples``."""
    return all(any(t.thread_id == thread.thread_id for t in x.threads) for x in samples)


def _commanded_by(waiting: list[_Status], serving: list[_Status]) -> bool:
    """Every waiting rank waits in a broadcast or a receive from a serving rank (its root or peer
    read from the c10d wrapper's locals): a service's workers waiting for its next command
    (Megatron-LM's text generation server: rank 0 serves HTTP, the others loop on a broadcast
    from it)."""
    roots = {s.rank for s in serving}
    return bool(waiting) and all(
        (s.op in ("broadcast", "broadcast_object_list") and _root_of(s) in roots)
        or (s.op == "recv" and _peer_of(s) in roots) for s in waiting)


def _called_target(s: _Status) -> tuple[str, str] | None:
    """(the job's line, the function it called) where the rank's main thread runs a call its
    own line passed as a thread's target (``Thread(target=server.serve_forever())``: the call
    runs there, and a server's loop never returns), read on the node (``called_target``) at a
    frame of the stack the status was read from; None otherwise. What makes it lie: a target
    factory (``target=make_worker(cfg)`` returning the function) the main thread is still
    inside: said of the factory too, its place right."""
    at = s.digest.proc.called_target
    frames = s.info.frames if s.info is not None else ()  # innermost first
    for i in range(1, len(frames)):
        if at == f"{frames[i].file}:{frames[i].line}":
            return at, frames[i - 1].function.rsplit(".", 1)[-1]
    return None


def _with_called_target(verdict: Verdict, blocked: list[_Status],
                        waiting: list[_Status]) -> Verdict:
    """The straggler verdict said as a thread's target called on the main thread (_called_target),
    when a blocked rank's is: its line first among the sites, what it means and how to mend it."""
    called = [(s, found) for s in blocked if (found := _called_target(s))]
    if not called:
        return verdict
    s, (line, function) = called[0]
    ranks = [c.rank for c, _ in called]
    # a server's accept loop is a thread's work, never a factory of it; another function may
    # be one (target=make_worker(cfg) returns the function): said as what it can be
    loop = s.info is not None and _serve_loop_at(s.info.frames) is not None
    unless = "" if loop else f" (unless {function} is a factory that returns the function)"
    _head, sep, tail = verdict.summary.partition(" while ")
    said = (f"{_ranks_label(ranks)} {_verb(ranks, 'runs', 'run')} a thread's target on "
            f"{'its' if len(ranks) == 1 else 'their'} main thread: {line} passes the call "
            f"{function}() as the target, not the function{unless}, so it runs there and has "
            "not returned,")
    why = (f"rank {s.rank}'s main thread is inside {function}, called from {line}, whose line "
           f"gives target= the call {function}(...) (read on the node): "
           "threading.Thread and multiprocessing.Process take the function and call it on the "
           "thread they start; given its call, the calling thread runs it first")
    evidence = [why]
    if loop and _commanded_by(waiting, [s]):
        # healthy_service_thread_called: a service started so serves all the same
        told = [w.rank for w in waiting]
        evidence.append(
            f"if the job is a service ({_ranks_label(told)} {_verb(told, 'waits', 'wait')} "
            f"for rank {s.rank}'s command), it serves anyway, on the main thread: only the "
            "Thread never started and the lines after that one never ran; a training job is "
            "hung there")
    return replace(
        verdict,
        # a server's loop called so returns only once another thread calls its shutdown(), and
        # the thread meant to run it never started: one sample is look enough
        severity="critical" if loop else verdict.severity,
        summary=said + (sep + tail if sep else ""),
        sites=_unique([line, *verdict.sites]),
        evidence=(*verdict.evidence, *evidence),
        next_step=(f"pass the function, not its call: target={function} without the "
                   f"parentheses (arguments in args=/kwargs=), so the thread runs it and the "
                   "main thread goes on; until then the rank never leaves that line"
                   + ("" if loop else f". If {function} only builds the thread's function "
                      "(a factory), the rank is held inside it: look at what it waits for")),
    )


def _serving_step(serving: list[tuple[_Status, str]], waiting: list[_Status]) -> Verdict:
    """A service idle between requests (_serving, _commanded_by): its server ranks, each with
    its accept loop, wait for clients, the others for the command it broadcasts on the next
    request. What would make this lie: the server's clients that never come because they
    wait for the job, which the job's stacks cannot show; and a training job whose rank serves
    on its main thread by mistake (serve_thread_called: ``Thread(target=server.serve_forever())``
    calls it there), the stacks the same: said in the next step, not told apart."""
    loops = _unique(loop for _, loop in serving)
    serving_ranks = [s for s, _ in serving]
    ranks = [s.rank for s in serving_ranks]
    sites = _unique(s.site for s in serving_ranks)
    summary = (
        f"a service waiting for its clients, not a hang: {_ranks_label(ranks)} "
        f"{_verb(ranks, 'serves', 'serve')} requests in {', '.join(loops)} at "
        f"{', '.join(sites[:3])} while {_waiting_phrase(waiting)} for "
        f"{'its' if len(ranks) == 1 else 'their'} next command")
    why = ("a server's accept loop waits for clients by design, and ranks waiting in a broadcast "
           "or a receive from it wait for the command a request sends them (a model served "
           "with torch.distributed, as Megatron-LM's text generation server does); a request "
           "that never completes would leave a handler thread in the job's code or in a "
           "collective")
    return Verdict(
        kind=VerdictKind.IDLE,
        severity="info",
        confidence="medium",
        summary=summary,
        culprit_ranks=tuple(ranks),
        sites=sites,
        evidence=(*[_proc_evidence(s) for s in serving_ranks[:8]],
                  *_group_evidence(waiting, limit=4), why),
        next_step=("send the service a request (or look at its clients): the waiting ranks "
                   "move with the command it broadcasts; a request that hangs leaves its "
                   "handler thread in the stacks (py-spy dump --pid PID). If the job trains "
                   "rather than serves, the server rank is hung in its accept loop: look at "
                   "the line that starts it (Thread(target=server.serve_forever()) runs the "
                   "server on the calling thread; pass the method, not its call)"),
    )


def _traced(s: _Status) -> bool:
    """Held in a tracing stop (state t): by a debugger, not by a signal."""
    return (s.digest.proc.state or "")[:1] == "t"


def _traced_phrase(s: _Status) -> str:
    """ "held in a tracing stop (state t) by pid 4242 (gdb -p 4100)" """
    tracer = s.digest.proc.tracer
    if tracer is None:
        return "held in a tracing stop (state t: a debugger attached)"
    what = " ".join(" ".join(arg.split()) for arg in tracer.cmdline)  # one line
    what = (what if len(what) <= 80 else what[:79] + "…") or tracer.comm or "?"
    return f"held in a tracing stop (state t) by pid {tracer.pid} ({what})"


def _exit_phrase(s: _Status) -> str:
    """ "at interpreter exit: its program has ended and Python waits for its non-daemon thread
    uploader in upload_shard (ckpt.py:62), waiting in SocketIO.readinto" """
    side = s.digest.side_threads
    if s.info is not None and s.info.top_user_frame is None and side:
        threads = "; ".join(text for text, _ in side[:2])
        shutdown = any(f.function.endswith("_shutdown") and f.file.endswith("threading.py")
                       for f in s.info.frames)
        # Python joins the non-daemon threads; an exit handler may join any (multiprocessing's
        # finalizer joins a queue's feeder thread: exit_queue_feeder)
        joins = ("Python waits for its non-daemon thread" if shutdown
                 else "an exit handler waits for its thread")
        return f"at interpreter exit: its program has ended and {joins} {threads}"
    doing = "busy" if s.status == "busy" else _BLOCK_PHRASES.get(s.kind, s.kind)
    return f"at interpreter exit: its program has ended, {doing} at {s.site} (an exit handler)"


def _collective_call(s: _Status) -> tuple[object, ...]:
    """The collective a waiting rank sits in, as the same code is the same call: its op, group
    and line, the file taken from its import root (one package installed in each rank's own
    venv is one program), not the stack's path (one all_reduce line reached by a rank's main
    thread and by another's request-handler thread is one collective)."""
    file, _, line = (s.site or "").rpartition(":")
    return (s.op, s.group, f"{library_path(file)}:{line}" if file else s.site)


def _waiting_phrase(waiting: list[_Status]) -> str:
    """ "ranks 0-6 wait in all_reduce at train.py:50" (several places listed by size; one
    place a collective and the way to it, so one line of a package installed in each rank's
    own venv is one place, the first rank's path shown)."""
    groups = _group_by(waiting, lambda s: (_collective_call(s), s.via))
    ordered = sorted(groups.values(), key=lambda g: (-len(g), g[0].rank))
    ranks = [s.rank for s in waiting]
    label = _ranks_label(ranks)
    if len(ordered) == 1:
        return f"{label} {_verb(ranks, 'waits', 'wait')} in {_where(ordered[0][0])}"
    places = "; ".join(
        f"{_where(g[0])} ({format_int_ranges(s.rank for s in g)})" for g in ordered[:3]
    )
    more = f"; {len(ordered) - 3} more" if len(ordered) > 3 else ""
    return f"{label} {_verb(ranks, 'waits', 'wait')} in collectives ({places}{more})"


def _group_evidence(statuses: list[_Status], limit: int = 8) -> list[str]:
    groups = _group_by(statuses, lambda s: (s.status, s.position or s.site, s.kind))
    ordered = sorted(groups.values(), key=lambda g: (-len(g), g[0].rank))
    lines = []
    for group in ordered[:limit]:
        head = group[0]
        detail = f" [{head.info.detail}]" if head.info is not None else ""
        lines.append(
            f"{_ranks_label(s.rank for s in group)} ({len(group)}): {_where(head)}{detail}"
        )
    if len(ordered) > limit:
        lines.append(f"... and {len(ordered) - limit} more groups")
    return lines


def _still_for(p: Rank) -> float | None:
    """Seconds from the sample the last one repeats to the last one: the collector kept it
    because none of the threads it shows had been on a CPU since (their schedstat)."""
    last = p.samples[-1] if p.samples else None
    if last is None or last.same_as is None or last.same_as >= len(p.samples) - 1:
        return None
    return last.t - p.samples[last.same_as].t


def _proc_evidence(s: _Status) -> str:
    p = s.digest.proc
    bits = [f"rank {s.rank} on {s.digest.node} pid {p.pid}"]
    if p.state:
        bits.append(f"state {p.state}")
    if p.cpu_percent is not None:
        bits.append(f"{p.cpu_percent:.0f}% CPU")
    if p.wchan and p.wchan != "0":
        bits.append(f"wchan {p.wchan}")
    if s.digest.stack_ids:
        n = len(s.digest.stack_ids)
        moved = "same stack" if s.digest.stationary else "stack moved"
        bits.append(f"{moved} in {n} sample{'s' if n != 1 else ''}")
    still = _still_for(p)
    if still is not None:
        bits.append(f"none of its Python threads ran in the last {still:.1f} s")
    for worker in p.workers:
        if worker.state and worker.state[:1] in ("Z", "X", "D", "T"):
            bits.append(f"{worker.role} pid {worker.pid} state {worker.state}")
    if s.kind == "child":
        bits.extend(_children_of(s))
    if s.kind == "pool":
        pool = [w for w in p.workers if w.role == "child"]
        bits.append(f"{len(pool)} worker process{'es' if len(pool) != 1 else ''} of its own: "
                    + (", ".join(f"pid {w.pid} state {w.state or '?'}"
                                 + (f" {w.cpu_percent:.0f}% CPU" if w.cpu_percent is not None
                                    else "") for w in pool[:4]) or "none"))
    if s.digest.busy_threads:
        bits.append("busy threads: " + ", ".join(s.digest.busy_threads[:3]))
    if s.status == "blocked" and s.digest.side_threads:
        bits.append("other threads in its own code: "
                    + "; ".join(text for text, _ in s.digest.side_threads[:3]))
    return ", ".join(bits)


def _children_of(s: _Status) -> list[str]:
    return [
        f"child pid {w.pid}" + (f": {' '.join(w.cmdline)[:160]}" if w.cmdline else "")
        + _through(w) for w in _waited_children(s.digest.proc)
    ][:3]


def _through(child: WorkerProcess) -> str:
    """`` (run through pid 41)``: the processes between the rank and its child (a shell)."""
    if not child.via:
        return ""
    return f" (run through pid {', '.join(str(pid) for pid in child.via[:3])})"


def _joins_a_thread(s: _Status) -> bool:
    """The main thread's innermost Python frame is ``Thread.join`` (or the lock wait inside
    it), and another thread of the rank sits in the job's own code."""
    if s.kind != "lock" or not s.digest.side_threads or s.info is None:
        return False
    top = next((f for f in s.info.frames if not f.native), None)
    return top is not None and top.file.endswith("threading.py") and top.function in (
        "Thread.join", "Thread._wait_for_tstate_lock", "join", "_wait_for_tstate_lock")


def _full_queue(s: _Status) -> bool:
    """The main thread is parked in a queue's put (queue.Queue, multiprocessing's): the queue
    is full and nothing takes from it (fsdp_grad_hook_blocked: the consumer thread died)."""
    if s.kind != "lock" or s.info is None:
        return False
    for frame in s.info.frames:
        if frame is s.info.top_user_frame:
            return False
        name = frame.function.rsplit(".", 1)[-1]
        if name == "put" and frame.file.endswith(("/queue.py", "/multiprocessing/queues.py")):
            return True
    return False


def _waits_for_thread(s: _Status) -> bool:
    """The main thread is parked in a thread-to-thread wait while another thread of the rank
    sits in the job's own code."""
    if s.kind != "lock" or not s.digest.side_threads or s.info is None:
        return False
    return waits_for_a_signal(s.info.frames)


def _waits_on_thread(s: _Status) -> str:
    """ "; its main thread waits on thread prefetch (loader.py:40)" when the main thread is
    parked on a queue/lock/future while another thread sits in the job's own code."""
    if s.kind == "child" and _children_of(s):
        return f" ({_children_of(s)[0]})"
    if s.kind not in ("data_loading", "lock") or not s.digest.side_threads or s.ended \
            or (_joins_a_thread(s) and s.via):
        return ""  # (a join moved to the thread it joins says so in its via)
    threads = "; ".join(text for text, _ in s.digest.side_threads[:2])
    fuse = ", which waits for a FUSE file system that does not answer" if _thread_on_fuse(s) else ""
    return f" (its main thread waits on thread {threads}{fuse})"


# ---------------------------------------------------------------------------------------------
# the rules


# Ties between equally large groups, decided by the first of these signs that one side has and
# the other has not (the side with it is the culprit); each is a sign of the extra call of a
# diverged path, in order of how much it says:
TIE_RULES = (
    "point-to-point (send/recv waits on one peer: a deadlocked pair, the others wait for it)",
    ("barrier or object collective (the usual extra call of a rank-gated logging, eval or "
     "checkpoint path)"),
    ("not the training machinery's collective (DDP, FSDP, autograd, optimizer, DeepSpeed "
     "issue the loop's usual one)"),
    "a frame of the job named like a side path (save, checkpoint, eval, log, metric, ...)",
    ("in DDP's forward, its buffer broadcast, where the other side is not: it began a step "
     "the other has not finished (a backward skipped on a non-finite loss, D8/D20)"),
    "holds rank 0 (`if rank == 0:` is the classic gate)",
)


# The other reading when the larger group shows one of TIE_RULES' signs (see _majority_diverged).
_DIVERGED_READING = (
    "they wait on each other point to point, not in the loop's collective",
    ("a barrier or object collective is the usual extra call of a path taken apart: an early "
     "exit from the loop, a rank-gated eval or checkpoint"),
    "their collective is not the training machinery's",
    "their frames are named like a side path",
    "they wait in DDP's forward: a step begun without this one's backward",
)
#: DDP's forward syncing its buffers before the step (broadcast from rank 0): a rank there while
#: the others are not has begun a step they have not finished (its backward's all_reduce
#: skipped). Its liar, not written: an extra backward on the other side (the diverger is then
#: the one in backward)
_DDP_FORWARD_SYNC = frozenset({"_pre_forward", "_sync_buffers", "_sync_module_buffers"})


def _tie_signs(group: list[_Status]) -> tuple[bool, ...]:
    """Which of TIE_RULES the group shows, in their order."""
    info = group[0].info
    op = group[0].op or ""
    user = [c.frame for c in info.classified if c.is_user] if info is not None else []
    files = [f.file for f in info.frames] if info is not None else []
    return (
        op in _P2P_OPS,
        op in ("barrier", "monitored_barrier") or op.endswith(("_object", "_object_list")),
        not any(marker in file for file in files for marker in _LOOP_MACHINERY),
        any(_named_like_a_side_path(f.function) for f in user),
        any(f.file.endswith("torch/nn/parallel/distributed.py")
            and f.function.rsplit(".", 1)[-1] in _DDP_FORWARD_SYNC
            for f in (info.frames if info is not None else ())),
        any(s.rank == 0 for s in group),
    )


def _tie_rule(first: list[_Status], second: list[_Status]) -> str | None:
    """The first of TIE_RULES that tells the two groups apart, or None."""
    for rule, a, b in zip(TIE_RULES, _tie_signs(first), _tie_signs(second)):
        if a != b:
            return rule
    return None


def _majority_diverged(reference: list[_Status], culprit_groups: list[list[_Status]]) -> str | None:
    """The sign of a diverged path (TIE_RULES but the last: holding rank 0 is no sign of
    divergence when groups differ in size) that the larger group shows and the smaller one
    does not, when only two groups wait: ranks 1-3 in a barrier after the loop they left
    early, rank 0 still in the loop's all_reduce. By stacks alone that cannot be told from
    rank 0 on a path of its own (one extra batch): the smaller group stays the culprit, the
    verdict says the other reading. None when the signs agree with the size."""
    if len(culprit_groups) != 1:
        return None
    mine, theirs = _tie_signs(reference), _tie_signs(culprit_groups[0])
    for rule, has, lacks in zip(TIE_RULES[:-1], mine, theirs):
        if has != lacks:
            return rule if has else None
    return None


def _downstream(waiting: list[_Status]) -> list[_Status]:
    """With every waiting rank's process group read: the ranks whose group's other members,
    each one, wait in a collective on another group. They wait for ranks held elsewhere and
    take no part in a disagreement (a 2-D mesh: ranks 0 and 1 in the data-parallel all_reduce,
    waiting for ranks 2 and 3, who disagree inside their tensor-parallel pair). Empty when a
    group is not read, or when no rank is left to disagree."""
    if not all(s.group and s.members for s in waiting):
        return []
    where = {s.rank: s for s in waiting}
    found = []
    for s in waiting:
        absent = [r for r in s.members if r not in where or where[r].position != s.position]
        if absent and all(r in where and where[r].group != s.group for r in absent):
            found.append(s)
    rest = {s.position for s in waiting if all(s is not f for f in found)}
    return found if len(rest) > 1 else []


def _mismatched(waiting: list[_Status], evidence_extra: list[str], severity: str) -> Verdict:
    groups = list(_group_by(waiting, lambda s: s.position).values())
    # The reference is the largest group; among equally large ones the least suspicious.
    # the reference: the largest group; among equally large ones the one without the first
    # sign of TIE_RULES that tells them apart (tuples of booleans sort False first)
    ranked = sorted(groups, key=lambda g: (-len(g), _tie_signs(g), g[0].rank))
    first, second = ranked[0], ranked[1]
    rule = _tie_rule(first, second) if len(first) == len(second) else None
    ambiguous = len(first) == len(second) and rule is None
    against: str | None = None  # a sign that the larger group is the one that diverged
    evidence = _group_evidence(waiting)
    alone = [g for g in groups if len(g) == 1]
    together = [g for g in ranked[1:] if len(g) > 1]
    if len(groups) >= 3 and alone and together:
        # Who waits for whom: ranks that wait together at one collective wait WITH each other
        # (a subgroup's collective, or the world's), for members that are elsewhere; a rank
        # nobody waits with is the one the others wait for. Without the groups' membership
        # this cannot be proved: the waiting-together groups are named as candidates.
        return _waits_alone(waiting, ranked, alone, together, evidence_extra, severity)
    # no rank waits alone: ranks that only wait for others held on other groups step aside
    downstream = _downstream(waiting)
    if downstream:
        lines = []
        for g in _group_by(downstream, lambda s: s.position).values():
            there = {s.rank for s in g}
            absent = [r for r in g[0].members if r not in there]
            lines.append(f"{_ranks_label(there)} {_verb(list(there), 'waits', 'wait')} on "
                         f"{g[0].group} (ranks {format_int_ranges(g[0].members)}) for "
                         f"{_ranks_label(absent)}, in collectives on other groups: downstream "
                         "of the disagreement, not in it")
        core = [s for s in waiting if all(s is not d for d in downstream)]
        verdict = _mismatched(core, [*lines, *evidence_extra], severity)
        waiters = [s.rank for s in downstream]
        return replace(
            verdict,
            summary=(f"{verdict.summary}; {_ranks_label(waiters)} "
                     f"{_verb(waiters, 'waits', 'wait')} for them on other groups"),
            evidence=tuple(_group_evidence(downstream)) + verdict.evidence,
        )
    if ambiguous:
        tied = [g for g in ranked if len(g) == len(first)]
        culprits = sorted(s.rank for g in tied for s in g)
        culprit_groups = tied
        reference: list[_Status] = []
        evidence.append(
            f"tie: {len(tied)} groups of {len(first)} ranks and no sign of which one diverged "
            f"(none of: {'; '.join(TIE_RULES)})"
        )
    else:
        reference = first
        culprit_groups = [g for g in ranked if g is not first]
        culprits = sorted(s.rank for g in culprit_groups for s in g)
        if len(first) == len(second):
            evidence.append(
                f"tie between groups of {len(first)}, decided by the first sign that tells them "
                f"apart ({TIE_RULES.index(str(rule)) + 1} of {len(TIE_RULES)}): "
                f"{_ranks_label(s.rank for s in second)}: {rule}; taken as the culprit"
            )
        else:
            against = _majority_diverged(first, culprit_groups)
    ops = {g[0].op for g in groups}
    same_op = len(ops) == 1
    one_site = len({g[0].site for g in groups}) == 1 and len({g[0].group for g in groups}) > 1
    how = (
        f"the same collective ({groups[0][0].op}) at one line on different process groups"
        if same_op and one_site
        else f"the same collective ({groups[0][0].op}) from different call sites"
        if same_op
        else "different collectives"
    )
    culprit_statuses = [s for g in culprit_groups for s in g]
    if reference:
        summary = (
            f"{_waiting_phrase(culprit_statuses)} while {_waiting_phrase(reference)}: "
            f"the ranks called {how}"
        )
        if against is not None:
            summary += (
                f"; or {_ranks_label(s.rank for s in reference)} took a path of their own "
                f"({_DIVERGED_READING[TIE_RULES.index(against)]}): stacks alone cannot tell"
            )
            evidence.append(
                f"the larger group shows a sign of a diverged path that the smaller lacks "
                f"({against}): the smaller group is named only for being smaller"
            )
    else:
        halves = " vs ".join(_waiting_phrase(g) for g in culprit_groups[:3])
        summary = f"{halves}: the ranks called {how}; cannot tell which side diverged"
    evidence.extend(evidence_extra)
    sites = _unique(s.site for s in sorted(culprit_statuses, key=lambda s: s.rank))
    # The named ranks are apart from each other too (a 2-D mesh: the two ranks of one tensor-
    # parallel pair in different collectives, the others already waiting in the data-parallel
    # one): the hang may start with one of them only, and nothing in the stacks says which.
    scattered = bool(reference) and len(culprit_groups) > 1
    if scattered:
        evidence.append(
            f"the {len(culprit_statuses)} ranks named are in {len(culprit_groups)} different "
            "places: the hang may start with one of them only (ranks that share a group and "
            "called different collectives); stacks alone cannot tell which"
        )
    # a tie decided by rank 0 alone is a guess, and so is a majority against a sign: said, and
    # the confidence says it
    weak = ambiguous or (reference and (rule == TIE_RULES[-1] or against is not None or scattered))
    return Verdict(
        confidence="medium" if weak else None,
        kind=VerdictKind.MISMATCHED_COLLECTIVE,
        severity=severity,
        summary=summary,
        culprit_ranks=tuple(culprits),
        sites=sites,
        evidence=tuple(evidence),
        next_step=NEXT_STEPS["mismatched_collective"],
    )


# Rooted collectives: every rank must pass the same root. (position of the root among the
# public function's arguments, its keyword names); torch.distributed's signatures.
_ROOTED = {
    "broadcast": (1, "src"), "reduce": (1, "dst"), "broadcast_object_list": (1, "src"),
    "gather": (2, "dst"), "scatter": (2, "src"), "gather_object": (2, "dst"),
    "scatter_object_list": (2, "src"),
}
# the c10d wrapper's args as py-spy prints them: "(<Tensor at 0x7f..>, 1)", "([...], 0)"
_SECOND_ARG_RE = re.compile(r"^\((?:<[^<>]*>|\[[^\[\]]*\]), (-?\d+)[,)]")


def _root_of(s: _Status) -> int | None:
    """The root (``src``/``dst``) a rank passed to the rooted collective it waits in, read from
    the c10d wrapper's ``args``/``kwargs`` locals (its first sample, py-spy --locals), when that
    sample shows it in that very collective; None when not read."""
    return _rank_argument(s, _ROOTED.get(s.op or ""), group_ranks=True)


# Point-to-point calls: the peer's global rank among the public function's arguments (torch's
# `send(tensor, dst, group, tag, group_dst)`); a group rank (``group_dst``) is not read
_PEERED = {"send": (1, "dst"), "recv": (1, "src")}


def _peer_of(s: _Status) -> int | None:
    """The global rank a rank's send or receive names (dst, src), from the c10d wrapper's
    locals as _root_of reads them; None when not read (a receive from any source)."""
    return _rank_argument(s, _PEERED.get(s.op or ""), group_ranks=False)


def _rank_argument(s: _Status, spec: tuple[int, str] | None, group_ranks: bool) -> int | None:
    """The rank argument ``spec`` places (its position, its keyword; ``group_`` + keyword too
    when ``group_ranks``) of the c10d call the rank waits in (_root_of, _peer_of)."""
    samples = [x for x in s.digest.proc.samples if x.groups]
    if spec is None or not samples:
        return None
    sample = samples[0]
    thread = main_thread(sample, s.digest.proc.pid)
    if thread is None:
        return None
    index, keyword = spec
    prefix = "(?:group_)?" if group_ranks else ""
    found: int | None = None
    for frame_index, name, text in sample.groups:
        frames = thread.frames
        if not (0 < frame_index < len(frames)
                and frames[frame_index].file.endswith("distributed/c10d_logger.py")
                and frames[frame_index - 1].function == s.op):
            continue
        if name == "kwargs":
            hit = re.search(rf'"{prefix}{keyword}": (-?\d+)', text)
            found = int(hit.group(1)) if hit else found
        elif name == "args" and index == 1 and found is None:
            hit = _SECOND_ARG_RE.match(text)
            found = int(hit.group(1)) if hit else None
    return found


def _stray_roots(waiting: list[_Status]) -> tuple[list[_Status], list[str]] | None:
    """Ranks waiting in one rooted collective (same call path) that passed different roots: the
    ones whose root is not the agreed one are culprits (a broadcast from src=1 that rank 1
    never joins waits forever; broadcast_root_mismatch). The agreed root: the one rank that
    names itself (the sender), else the root a strict majority names. None when the roots
    agree or were not read."""
    stray: list[_Status] = []
    evidence: list[str] = []
    for group in _group_by(waiting, lambda s: s.position).values():
        roots = {s.rank: root for s in group if (root := _root_of(s)) is not None}
        if len(set(roots.values())) < 2:
            continue
        selves = {r for r, root in roots.items() if root == r}
        counts = Counter(roots.values()).most_common()
        if len(selves) == 1:
            agreed, why = next(iter(selves)), "the rank that names itself, the sender"
        elif counts[0][1] > len(roots) / 2:
            agreed, why = counts[0][0], "the root most of them name"
        else:
            continue
        keyword = _ROOTED[group[0].op or ""][1]
        stray.extend(s for s in group if roots.get(s.rank, agreed) != agreed)
        named = ", ".join(f"rank {r} {keyword}={root}" for r, root in sorted(roots.items()))
        evidence.append(f"{group[0].op} at {group[0].site}: the ranks passed different roots "
                        f"({named}, read from the c10d wrapper's locals); {keyword}={agreed} "
                        f"taken as the agreed one ({why})")
    return (stray, evidence) if stray else None


def _root_mismatch(waiting: list[_Status], stray: list[_Status], evidence: list[str],
                   severity: str) -> Verdict:
    ranks = [s.rank for s in stray]
    others = [s for s in waiting if s.rank not in ranks]
    keyword = _ROOTED[stray[0].op or ""][1]
    roots = ", ".join(sorted({f"{keyword}={_root_of(s)}" for s in stray}))
    summary = (f"{_waiting_phrase(stray)} with {roots}, a root the other ranks do not name"
               + (f", while {_waiting_phrase(others)}" if others else "")
               + ": the ranks passed different roots to one collective")
    return Verdict(
        kind=VerdictKind.MISMATCHED_COLLECTIVE,
        severity=severity,
        summary=summary,
        culprit_ranks=tuple(ranks),
        sites=_unique(s.site for s in stray),
        evidence=(*evidence, *_group_evidence(waiting)),
        next_step=NEXT_STEPS["mismatched_collective"],
    )


def _waits_alone(
    waiting: list[_Status],
    ranked: list[list[_Status]],
    alone: list[list[_Status]],
    together: list[list[_Status]],
    evidence_extra: list[str],
    severity: str,
) -> Verdict:
    culprit_statuses = sorted((g[0] for g in alone), key=lambda s: s.rank)
    culprits = [s.rank for s in culprit_statuses]
    others = [s for g in ranked for s in g if len(g) > 1]
    evidence = _group_evidence(waiting)
    evidence.append(
        f"{_ranks_label(culprits)} "
        f"{_verb(culprits, 'waits', 'wait')} alone at "
        f"{_verb(culprits, 'its', 'their')} collective, the others in groups that "
        "wait together: a rank nobody waits with is the one the groups wait for"
    )
    read = all(s.group and s.members for s in waiting)
    if read:
        # who waits for whom: each class waits for its group's members that are not in it
        for g in ranked:
            there = {s.rank for s in g}
            absent = [r for r in g[0].members if r not in there]
            evidence.append(
                f"{_ranks_label(there)} {_verb(list(there), 'waits', 'wait')} on {g[0].group} "
                f"(ranks {format_int_ranges(g[0].members)}) for {_ranks_label(absent)}"
            )
    else:
        evidence.append(
            "group membership is not visible in the stacks: if "
            + "; ".join(f"{_where(g[0])} ({format_int_ranges(s.rank for s in g)})" for g in together)
            + " is on the whole world and not a subgroup (new_group), those ranks diverged too"
        )
    evidence.extend(evidence_extra)
    return Verdict(
        kind=VerdictKind.MISMATCHED_COLLECTIVE,
        severity=severity,
        summary=(
            f"{_waiting_phrase(culprit_statuses)} while {_waiting_phrase(others)}: "
            f"{_verb(culprits, 'it is', 'they are')} the only "
            f"{_verb(culprits, 'rank', 'ranks')} nobody waits with; the others wait "
            "in groups (subgroups' collectives) for the ranks that are elsewhere"
        ),
        culprit_ranks=tuple(culprits),
        sites=_unique(s.site for s in culprit_statuses),
        evidence=tuple(evidence),
        next_step=(
            "check the process group of the culprit's collective: a call without group= runs "
            "on the world while the others use a subgroup (new_group), or a rank-gated call; "
            "run with TORCH_DISTRIBUTED_DEBUG=DETAIL to have PyTorch name the mismatch"
        ),
        confidence=None if read else "medium",
    )


def _feeder_stuck(s: _Status) -> bool:
    """A multiprocessing.Queue's feeder thread (in multiprocessing/queues.py's _feed) sits in a
    write of the rank's blocked_calls: the queue cannot flush."""
    writing = {c.tid for c in s.digest.proc.blocked_calls if c.call in ("write", "writev")}
    last = next((x for x in reversed(s.digest.proc.samples) if x.threads), None)
    return last is not None and any(
        t.os_thread_id in writing and any(
            f.function.endswith("_feed") and f.file.endswith("multiprocessing/queues.py")
            for f in t.frames)
        for t in last.threads)


def _straggler(blocked: list[_Status], waiting: list[_Status], severity: str) -> Verdict:
    kinds = Counter(s.kind for s in blocked)
    main_kind = kinds.most_common(1)[0][0]
    # a main thread parked on a lock while another thread sits in the job's code waits on that
    # thread (a future, an event, a join), not on a lock some thread holds
    step = "thread" if main_kind == "lock" and any(_waits_for_thread(s) for s in blocked) \
        else main_kind
    if step == "thread" and any(_thread_on_fuse(s) for s in blocked):
        step = "fuse"  # the thread the main one waits for waits on a mount that does not answer
    if all(s.ended for s in blocked) and any(s.digest.side_threads for s in blocked):
        step = "exit"
        if any(_feeder_stuck(s) for s in blocked):
            step = "queue_feeder"
    if step == "lock" and any(_full_queue(s) for s in blocked):
        step = "queue_full"
    if main_kind == "stopped" and any(_traced(s) for s in blocked):
        step = "traced"
    if main_kind == "io" and any(_connects(s.digest.proc) for s in blocked):
        step = "connect"
    if any(_debugger(s) for s in blocked):
        step = "debugger"
    before = _before_training(blocked, waiting)
    if before:
        step = "before_training"
    ranks = [s.rank for s in blocked]
    groups = _group_by(blocked, lambda s: (s.kind, s.site))
    places = "; ".join(
        _where(g[0]) + _waits_on_thread(g[0])
        for g in sorted(groups.values(), key=lambda g: g[0].rank)
    )
    verb = _verb(ranks, "is", "are")
    tail = f" while {_waiting_phrase(waiting)}" if waiting else ", outside any collective"
    summary = f"{_ranks_label(ranks)} {verb} {places}{tail}"
    if before:
        theirs, others = before
        summary += (f": {_ranks_label(ranks)} run{'s' if len(ranks) == 1 else ''} {theirs}, "
                    f"not {others} as the waiting ranks do, so most likely "
                    f"{_verb(ranks, 'its', 'their')} training has not started yet (a step "
                    "before it that has not ended: staging data, a download)")
    evidence = [_proc_evidence(s) for s in blocked[:8]]
    evidence.extend(line for s in blocked[:4] for line in _call_evidence(s))
    evidence.extend(line for s in blocked[:4] if (line := _holder_evidence(s)))
    if waiting:
        evidence.extend(_group_evidence(waiting, limit=4))
    return Verdict(
        kind=VerdictKind.STRAGGLER,
        severity=severity,
        summary=summary,
        culprit_ranks=tuple(ranks),
        sites=_unique(site for s in blocked for site in _blocked_sites(s)),
        evidence=tuple(evidence),
        next_step=STRAGGLER_STEPS.get(step, STRAGGLER_STEPS["blocked"]),
    )


def _before_training(blocked: list[_Status], waiting: list[_Status]) -> tuple[str, str] | None:
    """(the blocked ranks' programs, the waiting ranks') when the waiting ranks all wait in the
    world's start (init_process_group) and every blocked rank runs another program than all of
    them, with no frame of torch.distributed on any of its stacks: a wrapper's step before the
    training, in Python, holding the task's Slurm identity (staging_python_stalled). What would
    make this lie: a job of several programs (srun --multi-prog, a coordinator beside its
    workers) whose other program is stuck before its own init_process_group: the same words,
    hedged ("most likely"), the culprits and their line the same."""
    if not waiting or not all(s.status == "waiting" and s.op in STARTUP_OPS for s in waiting):
        return None
    mine = {program_of(s.digest.proc.cmdline) for s in blocked}
    others = {program_of(s.digest.proc.cmdline) for s in waiting}
    if mine & others or "?" in mine | others:
        return None
    if any("torch/distributed/" in f.file for s in blocked for x in s.digest.proc.samples
           for t in x.threads for f in t.frames):
        return None
    return ", ".join(sorted(mine)), ", ".join(sorted(others))


def _dead_threads(blocked: list[_Status], findings: Sequence[LogFinding]) -> list[LogFinding]:
    """Tracebacks in the job's log of threads that died (their outermost frame threading's
    ``_bootstrap_inner``: "Exception in thread NAME"), of a rank whose main thread is parked on a
    thread-to-thread wait (a queue, an event, a condition, a lock) or of no rank (an unprefixed
    log): what a dead thread fed, its queue or its event, never comes, and no stack shows it
    (pipeline_heartbeat_hang: a label loader thread dead on a corrupt record, the last stage in
    queue.get(); its only other thread a health check, which the summary named). What would
    make this lie: a thread that died harmlessly earlier (a progress bar's) while the producer
    waited on is alive and stuck: said beside the threads the stacks show, not instead."""
    parked = {s.rank for s in blocked if not s.ended and s.kind in ("data_loading", "lock")}
    if not parked:
        return []
    return [f for f in findings
            if f.kind == "traceback" and (f.rank is None or f.rank in parked)
            and _thread_frames(f.fields.get("frames", ""))]


def _thread_frames(frames: str) -> bool:
    """The traceback's outermost frame is a thread's start (threading's _bootstrap_inner)."""
    first = frames.split("\n", 1)[0]
    return first.endswith(":_bootstrap_inner") and "threading.py:" in first


def _fed_by_a_dead_thread(s: _Status, findings: Sequence[LogFinding]) -> _Status:
    """A rank taken as working through a thread of its own (_thread_computes) whose job log
    holds the traceback of a thread that died (_dead_threads: its own, or unlabelled): the
    thread its main thread waits for is most likely that one, not the one that computes
    (dead_reader_busy_sidecar: a validation tokenizer busy beside a dead prefetch thread, which
    was "a slow worker thread or a hang, cannot tell"). Blocked again, as without the thread
    that computes. What would make this lie: a slow worker thread beside an unrelated thread
    that died (a progress bar's): a straggler called on a slow job; so not when the thread that
    computes holds the queue or event the main thread waits on (_producer_computes:
    healthy_slow_labels_dead_telemetry, a metrics thread dead at the start beside a slow label
    loader). A producer that reaches its queue through an attribute (``self.queue``) shows no
    such hold: still blocked then."""
    if not s.through_thread or s.info is None or _producer_computes(s.digest) is not None:
        return s
    blocked = replace(s, status="blocked", kind=s.info.kind, through_thread=False)
    return blocked if _dead_threads([blocked], findings) else s


def _with_dead_threads(verdict: Verdict, blocked: list[_Status],
                       findings: Sequence[LogFinding]) -> Verdict:
    """The straggler verdict with the tracebacks of threads that died (_dead_threads) said in
    its summary and evidence, and what to do about them."""
    dead = _dead_threads(blocked, findings)
    if not dead:
        return verdict
    first = dead[0]
    where = f"{first.fields.get('function', '?')} ({first.fields.get('site', '?')})"
    whose = "" if first.rank is not None else " (no rank label: it may be another rank's)"
    said = (f"a thread of the job died: {first.fields.get('exception', 'an exception')} in "
            f"{where}, {first.source}:{first.line_no}{whose}")
    head, sep, tail = verdict.summary.partition(" while ")
    summary = f"{head}; {said}{sep}{tail}" if sep else f"{verdict.summary}; {said}"
    # a rank putting into a full queue waits for its consumer (fsdp_grad_hook_blocked)
    full = any(_full_queue(s) for s in blocked)
    then = ("it no longer takes from the queue the rank puts into" if full
            else "what it fed (a queue, an event) never comes")
    evidence = [f"{f.source}:{f.line_no}: a thread's traceback (\"Exception in thread\"): "
                f"{f.text}{'' if f.rank is None else f' (rank {f.rank})'}: {then}"
                for f in dead[:3]]
    return replace(verdict, summary=summary, evidence=(*evidence, *verdict.evidence),
                   next_step=verdict.next_step if full else STRAGGLER_STEPS["thread_died"])


# A debugger's prompt on the main thread's stack: the stdlib's pdb (bdb below it), ipdb and
# IPython's debugger (a Pdb subclass), pudb. Known by the modules' files, not thread names.
_DEBUGGER_FILES = {"pdb.py": "pdb", "bdb.py": "pdb", "IPython/core/debugger.py": "ipdb"}
_DEBUGGER_PACKAGES = {"ipdb": "ipdb", "pudb": "pudb"}


def _debugger(s: _Status) -> str | None:
    """The debugger whose prompt stopped the rank (its main thread's frames of its first
    sample, inside the job's innermost frame: the prompt its trace function opened), or None:
    a breakpoint() left in the code (breakpoint_left_in). A program run under `python -m pdb`
    has pdb's frames below its own, not inside: not stopped by it."""
    samples = [x for x in s.digest.proc.samples if x.threads]
    thread = main_thread(samples[0], s.digest.proc.pid) if samples else None
    if thread is None:
        return None
    for frame in thread.frames:  # innermost first
        if frame.native:
            continue
        if is_user_file(frame.file):
            return None
        path = library_path(frame.file)
        name = _DEBUGGER_FILES.get(path) or _DEBUGGER_PACKAGES.get(path.split("/", 1)[0])
        if name:
            return name
    return None


def _blocked_sites(s: _Status) -> tuple[str, ...]:
    """A sleeping or polling rank's line is where the sample caught it (a poll loop has two):
    its function is named too."""
    info = s.info
    if s.kind not in ("poll", "sleep") or info is None or info.top_user_frame is None:
        return (s.site,) if s.site else ()
    return _unique([s.site, function_site(info.top_user_frame)])


def _busy_sites(s: _Status) -> tuple[str, ...]:
    """file:line when the line held in every sample, then file:function: a busy rank's line
    changes with the moment it is sampled, the function it spins in does not."""
    info = s.info
    if not s.digest.stationary or info is None or info.top_user_frame is None:
        return (s.site,) if s.site else ()
    top = info.top_user_frame
    return _unique([s.site, function_site(top)])


def _spinning(busy: list[_Status], waiting: list[_Status], severity: str) -> Verdict:
    ranks = [s.rank for s in busy]
    groups = _group_by(busy, lambda s: s.site)
    places = "; ".join(
        ("moving in " if not g[0].digest.stationary else "busy at ") + str(g[0].site)
        for g in sorted(groups.values(), key=lambda g: g[0].rank)
    )
    verb = _verb(ranks, "is", "are")
    tail = f" while {_waiting_phrase(waiting)}" if waiting else ", outside any collective"
    # a moving rank is reported by its own function even when the sample caught a library leaf
    own = all(not s.digest.stationary or s.info is None or s.info.kind == "user" for s in busy)
    where = ("in its own code" if len(ranks) == 1 else "in their own code") if own else "computing"
    summary = f"{_ranks_label(ranks)} {verb} busy {where} ({places}){tail}"
    evidence = [_proc_evidence(s) for s in busy[:8]]
    if waiting:
        evidence.extend(_group_evidence(waiting, limit=4))
    return Verdict(
        kind=VerdictKind.SPINNING,
        severity=severity,
        summary=summary,
        culprit_ranks=tuple(ranks),
        sites=_unique(site for s in busy for site in _busy_sites(s)),
        evidence=tuple(evidence),
        next_step=NEXT_STEPS["spinning"],
    )


def _native_step(s: _Status) -> bool:
    """Computing in native code: its main thread active in every sample and without the GIL
    (a tensor kernel, a C call that released it) in more than half of them, on one line or
    moving (an evaluation loop: forward passes, then its metrics in Python), for less than
    LONG_STEP_S of samples. A loop spinning in Python holds the GIL in (nearly) every sample."""
    samples = [x for x in s.digest.proc.samples if x.threads]
    if not samples:
        return False
    span = samples[-1].t - samples[0].t
    if span >= LONG_STEP_S:
        return False
    threads = [main_thread(x, s.digest.proc.pid) for x in samples]
    if not all(t is not None and t.active for t in threads):
        return False
    return 2 * _released(threads) > len(threads)


def _released(threads: Sequence[ThreadStack | None]) -> int:
    """How many of these samples of a thread show it without the GIL."""
    return sum(1 for t in threads if t is not None and not t.owns_gil)


def _slow_step(busy: list[_Status], waiting: list[_Status]) -> Verdict:
    """The spin rule's exception: fewer ranks computing in native code on one line, seen for
    less than LONG_STEP_S, than ranks waiting for them, and no GPU: a compute step longer than
    the look is the same sight, so it is said (info, low confidence) and never alarms. A spin in
    Python holds the GIL; ranks hung at a CUDA sync (NCCL) are on GPU nodes."""
    verdict = _spinning(busy, waiting, "info")
    samples = max(len(s.digest.proc.samples) for s in busy)
    span = max((s.digest.proc.samples[-1].t - s.digest.proc.samples[0].t) for s in busy)
    ranks = [s.rank for s in busy]
    released = [_released([main_thread(x, s.digest.proc.pid) for x in s.digest.proc.samples
                           if x.threads]) for s in busy]
    how = (f"without the GIL in {min(released)} of {samples} samples"
           if min(released) < samples else f"without the GIL in {samples} sample(s)")
    line = ("on one line" if all(s.digest.stationary for s in busy)
            else "its line moving" if len(busy) == 1 else "their lines moving")
    why = (
        f"{_ranks_label(ranks)} {_verb(ranks, 'computes', 'compute')} in native code (main "
        f"thread active, {how}, {line}) over {span:.1f} s: a compute step or an evaluation "
        "longer than that looks the same as a hang; a loop spinning in Python holds the GIL "
        "and is called spinning"
    )
    return _cannot_tell(verdict, "a slow step or a hang", why, NEXT_STEPS["slow_step"])


#: torch.compile at work: Dynamo converting a Python frame, Inductor compiling a graph (a compiled
#: function that runs has neither: only eval_frame.py's frames)
COMPILE_FILES = ("torch/_dynamo/convert_frame.py", "torch/_inductor/compile_fx.py")


def _compiling(s: _Status) -> bool:
    """The rank's main thread inside torch.compile's compiler in every sample read of it, and
    at work there: on a CPU (Dynamo tracing, Inductor's code generation: Python holding the
    GIL, what the spin rule calls spinning), or waiting for children that compute (the C++
    builds of its compile workers). One idle there with its children idle too (a compile
    worker that died or hangs) is not: it stays blocked."""
    samples = [x for x in s.digest.proc.samples if x.threads]
    threads = [main_thread(x, s.digest.proc.pid) for x in samples]
    if not threads or not all(
            t is not None and any(f.file.endswith(COMPILE_FILES) for f in t.frames)
            for t in threads):
        return False
    return s.status == "busy" or bool(_running(w for w in s.digest.proc.workers
                                               if w.role == "child"))


def _compile_step(compiling: list[_Status], waiting: list[_Status]) -> Verdict:
    """Ranks compiling with torch.compile while the rest wait for them: a job's first steps, or
    a recompilation (a new shape), which a short look cannot tell from a hang; it ends (info,
    low confidence; healthy_compile_warmup: a critical "spinning" before)."""
    ranks = [c.rank for c in compiling]
    sites = "; ".join(_unique(c.site for c in compiling))
    verdict = replace(
        _spinning(compiling, waiting, "info"),
        summary=(f"{_ranks_label(ranks)} {_verb(ranks, 'compiles', 'compile')} with "
                 f"torch.compile at {sites} while {_waiting_phrase(waiting)}"),
        sites=_unique(c.site for c in compiling))
    why = (f"{_ranks_label(ranks)}: the main thread inside torch.compile's compiler (Dynamo's "
           "convert_frame, Inductor's compile_fx) in every sample, computing or waiting for its "
           "compile workers' builds: a first step's or a recompilation's compile looks the same "
           "as a hang for a short look, and ends")
    return _cannot_tell(verdict, "a torch.compile compile or a hang", why,
                        NEXT_STEPS["compiling"])


def _cannot_tell(verdict: Verdict, what: str, why: str, next_step: str) -> Verdict:
    """A spin verdict said as what a short look cannot tell from a hang (info, low
    confidence): ``what`` heads its summary, ``why`` closes its evidence."""
    return replace(
        verdict,
        kind=VerdictKind.SLOW_STEP,
        confidence="low",
        summary=f"{what}, cannot tell: {verdict.summary}",
        evidence=(*verdict.evidence, why),
        next_step=next_step,
    )


def _gated_phase(busy: list[_Status], waiting: list[_Status]) -> bool:
    """Fewer ranks busy in their own code than wait for them (as many when each waiting rank
    waits for what a busy rank sends it: rank 0 preparing the weights it broadcasts to one
    evaluator, healthy_eval_rank; or waits in a barrier or the group's start-up: a job of two
    ranks, a gate on the local rank), and every waiting rank waits in
    a barrier, or in a rooted collective whose root is a busy rank: the shape of a rank-gated
    phase (``if rank == 0: prepare() / evaluate() / save()`` then a barrier; Hugging Face's
    main_process_first; a broadcast of what rank 0 prepares), which lasts as long as it
    lasts. The process group's start-up is such a point too: a rank that prepares alone
    before it joins (indexes its shard, downloads, compiles) while the others wait in
    init_process_group (slow_start_rank). A rank late for the step's own collective
    (spinning_rank) is not this, nor are ranks in a barrier on a subgroup (read from their
    locals) the busy ranks are not in."""
    roots = {s.rank for s in busy}
    sent = all(s.op in _ROOTED and _root_of(s) in roots for s in waiting)
    # as many busy as waiting: a job of two ranks (rank 0 evaluates, rank 1 waits in the
    # barrier: rank0_eval_barrier at 2 x 1 was a critical "spinning"), or a gate on the local
    # rank (one rank a node prepares); in a barrier, the process group's start-up, or a
    # broadcast from a busy rank, not in the step's own collective
    at_a_gate = all(s.op in ("barrier", "monitored_barrier") or s.op in STARTUP_OPS
                    for s in waiting)
    if not waiting or len(busy) > len(waiting) or (
            len(busy) == len(waiting) and not (sent or at_a_gate)):
        return False
    # a barrier on a subgroup the busy ranks are not in does not wait for them
    if any(s.members and not roots <= set(s.members) for s in waiting):
        return False
    return all(s.op in ("barrier", "monitored_barrier") or s.op in STARTUP_OPS
               or (s.op in _ROOTED and _root_of(s) in roots)
               or (s.op == LOCK_WAIT_OP and s.waits_for in roots)
               or (s.op == PEER_WAIT_OP and _polls_a_socket(s)) or s.op == POLL_WAIT_OP
               for s in waiting)


def _shared_phase(busy: list[_Status], waiting: list[_Status]) -> bool:
    """More ranks computing than waiting, all at one line: most of the job at work in one phase
    that the waiting ranks are past (less of that work, or none: a broadcast's sender), not the
    sight of a spin, which is a rank the others wait for (healthy_object_broadcast: ranks 1-3
    unpickling rank 0's dict for seconds, one C call holding the GIL, while rank 0 waits in the
    step's all_reduce, called spinning, critical). Only ranks that hold the GIL (Python at
    work, or a C call that keeps it), and not on GPU nodes: ranks busy without the GIL at the
    next sync while the rest wait is how a hung NCCL collective shows, GPU state read or not
    (bigscience's 6 to 2, text dumps without nvidia-smi). What it hides: most ranks in one
    endless Python loop on a CPU job, the few not in it waiting; said, as a slow step, with
    the ranks and their line. One phase is one function of the job's code, not one line
    (healthy_shared_python_phase: ranks 1-3 normalising text, one caught at line 29 and two at
    30 of `normalised`, read as three spinning ranks); a script's top level, no function, is
    one line."""
    phases = {_phase_site(s) for s in busy}
    return (bool(waiting) and len(busy) > len(waiting)
            and len(phases) == 1 and None not in phases
            and not any(_native_step(s) for s in busy))


def _phase_site(s: _Status) -> str | None:
    """file:function of the job's code a busy rank works in (a comprehension's is its
    function's); its line where that is a module's top level."""
    site = _busy_sites(s)[-1] if s.site else None
    return s.site if site is None or site.endswith(":<module>") else site


def _shared_step(busy: list[_Status], waiting: list[_Status]) -> Verdict:
    """Ranks in a shared compute phase the waiting ranks are past (_shared_phase): info."""
    ranks = [s.rank for s in busy]
    early = [s.rank for s in waiting]
    one_line = len({s.site for s in busy}) == 1 and all(s.digest.stationary for s in busy)
    place = f"at one line ({busy[0].site})" if one_line else f"in one function ({_phase_site(busy[0])})"
    why = (f"{_ranks_label(ranks)} {_verb(ranks, 'computes', 'compute')} {place} "
           f"while fewer, {_ranks_label(early)}, "
           f"{_verb(early, 'waits', 'wait')} for them in {waiting[0].op}: most of the job at "
           "work in one phase, the waiting ranks past it (less of that work, or none); an "
           "endless loop there looks the same")
    return _cannot_tell(_spinning(busy, waiting, "info"), "a slow step or a hang", why,
                        NEXT_STEPS["slow_step"])


def _polls_a_socket(s: _Status) -> bool:
    """A peer wait in a socket wait of its own (poll, select, a receive), not a futex: a
    TCPStore ``wait``/``get`` for a key a rank will set, or a receive from a peer, as when
    the others wait in a barrier (healthy_store_prepare: rank 2 builds the dataset index for
    minutes, then sets the key). An asynchronous collective's ``Work.wait()`` waits on a
    futex (gloo's threads do its I/O): the step's own collective, as late for a spinner as an
    all_reduce, not this."""
    wchan = s.digest.proc.wchan or ""
    return "futex" not in wchan and any(needle in wchan for needle in _SOCKET_WCHAN)


def _gated_step(busy: list[_Status], waiting: list[_Status]) -> Verdict:
    """Ranks busy in a rank-gated phase the others wait for (_gated_phase): a preparation, an
    evaluation or a save longer than the look looks the same as an endless loop in it, so it is
    said (info, low confidence), like a slow compute step."""
    verdict = _spinning(busy, waiting, "info")
    ranks = [s.rank for s in busy]
    works = f"{_ranks_label(ranks)} {_verb(ranks, 'works', 'work')} outside any collective"
    if all(s.op in STARTUP_OPS for s in waiting):
        phase = "a slow start or a hang"
        why = (f"{works} before joining the process group while the others wait for it in "
               f"{waiting[0].op}: a rank that prepares alone before it joins (indexing its "
               "shard, downloading, compiling) looks the same as one that loops")
    elif all(s.op == LOCK_WAIT_OP for s in waiting):
        phase = "a build under a file lock or a hang"
        why = (f"{works} holding the file lock the others wait for: the shape of one rank "
               "building a shared cache under its lock (FileLock, flock) while the others "
               "wait to reuse it, which lasts as long as the build; an endless loop there "
               "looks the same")
    elif any(s.op == PEER_WAIT_OP for s in waiting):
        phase = "a rank-gated phase or a hang"
        why = (f"{works} while the others wait on a socket of their own (a TCPStore key it "
               "is to set, a reply from it: `store.wait`, `store.get`): the shape of a rank "
               "preparing alone what the others wait for, which lasts as long as its work; "
               "an endless loop there looks the same")
    else:
        phase = "a rank-gated phase or a hang"
        why = (
            f"{works} while the others wait for it in a barrier (or in a broadcast from it): "
            "the shape of a rank-gated phase (`if rank == 0: ...` then a barrier: data "
            "preparation, evaluation, saving), which lasts as long as its work; an endless "
            "loop there looks the same"
        )
    return _cannot_tell(verdict, phase, why, (
        "attach again in a minute: a rank that moved on (or logged) was only slow; one still "
        "in the same function loops: py-spy dump --pid PID --locals shows its state; raise the "
        "process group's timeout if the phase is long by design"))


def _finished_early(snapshot: Snapshot, layout: _Layout, waiting: list[_Status],
                    blocked: list[_Status], busy: list[_Status], dead: list[_Status]) -> str:
    """Why the ranks with no process are taken as finished ("" when they are not): every rank
    left works, none waits for anyone (in a collective, on a peer) or is blocked, and the
    missing ranks left no crash in the job's log (healthy_rank0_final_eval: training over,
    rank 0 evaluates alone after the others returned). A crash leaves a traceback or srun's
    exit code; a rank that returned too early is missed once a rank waits for it, which is
    when the job hangs, not before."""
    if not layout.missing or not busy or waiting or blocked or dead:
        return ""
    if _crashed_in_log(snapshot, layout.missing):
        return ""
    gone = layout.missing
    return (f"{_ranks_label(gone)} {_verb(gone, 'has', 'have')} no process, left no error in "
            f"the job's log, and no rank waits for {'it' if len(gone) == 1 else 'them'}: "
            "taken as finished")


def _crashed_in_log(snapshot: Snapshot, ranks: Sequence[int]) -> bool:
    """The job's log holds an exit code (srun's "task N: Exited with exit code C") or a
    traceback of one of ``ranks``, or a traceback of no rank (unprefixed: it may be theirs)."""
    return any(f.kind in ("task_exit", "traceback") and f.rank in ranks
               or f.kind == "traceback" and f.rank is None for f in snapshot.log_findings)


def _works_at_exit(s: _Status) -> bool:
    """A rank past its program's end that still works: CPU or I/O measured between samples,
    data moved on one of its connections in strace's window (recent_traffic: a blocking send
    of a large upload is one system call that returns only at its end), or transfer calls;
    but not data that moved only beside the connections its threads wait on (_quiet_waits)."""
    digest = s.digest
    recent = _windowed(digest.proc)
    calls = _traffic(digest)
    moved = bool((recent is not None and recent.active)
                 or (calls is not None and calls >= TRAFFIC_CALLS))
    return bool(_measured_work(digest) or (moved and not _quiet_waits(digest.proc)))


def _windowed(proc: Rank) -> RecentTraffic | None:
    """The rank's connections looked up again when strace stopped (which carried data in its
    window), or None: not read then (no strace; a look without strace reads them at its end,
    ``read_at`` "look", which only the look's own rules read)."""
    recent = proc.recent_traffic
    return recent if recent is not None and recent.read_at != "look" else None


def _socket_waits(proc: Rank) -> list[BlockedCall]:
    """The rank's threads sitting in a transfer call on an established TCP connection."""
    return [c for c in proc.blocked_calls if c.call in TRANSFER_CALLS and c.local and c.remote
            and not c.remote.endswith(":0")]


def _connects(proc: Rank) -> list[BlockedCall]:
    """The rank's threads sitting in connect() on a socket still in SYN_SENT (the handshake
    never answered: connect_dropped), its far end as the collector read it (older collectors
    read none: "...:0")."""
    pending = {c.local for c in proc.connections if c.state == "SYN_SENT"}
    return [c for c in proc.blocked_calls if c.call == "connect" and c.local in pending]


def _connect_phrase(proc: Rank) -> str:
    calls = _connects(proc)
    if not calls:
        return ""
    far = {c.remote for c in calls if c.remote and not c.remote.endswith(":0")}
    where = f" to {', '.join(sorted(far))}" if far else ""
    return f", connecting{where} (SYN_SENT: nothing answers its connection request)"


def _quiet_waits(proc: Rank) -> bool:
    """Threads of the rank wait in send/receive calls on connections that carried no data in
    strace's window, and none on one that did: the data the window saw moved beside them (a
    daemon's heartbeat, a monitor), not what they wait for (exit_heartbeat_stuck). False when
    the collector read no such call or no traffic (an older collector, no strace)."""
    recent = _windowed(proc)
    waits = _socket_waits(proc)
    if recent is None or not waits:
        return False
    active = {(c.local, c.remote) for c in recent.active}
    return not any((c.local, c.remote) in active for c in waits)


def _computes_in_python(digest: RankDigest) -> bool:
    """Its main thread active holding the GIL in most samples: a loop in Python, whatever I/O
    it also does."""
    threads = [main_thread(x, digest.proc.pid) for x in digest.proc.samples if x.threads]
    held = sum(1 for t in threads if t is not None and t.active and t.owns_gil)
    return 2 * held > len(threads) if threads else False


def _moving_data(proc: Rank) -> tuple[BlockedCall, RecentConnection] | None:
    """The send or receive the rank's main thread sits in, with its connection, when that
    connection carried data in strace's window: the call is moving data, however long it lasts
    (a large upload to a throttled store: rank0_upload_barrier); None otherwise."""
    recent = _windowed(proc)
    if recent is None:
        return None
    active: dict[tuple[str | None, str | None], RecentConnection] = {
        (c.local, c.remote): c for c in recent.active}
    return next(((c, active[(c.local, c.remote)]) for c in _socket_waits(proc)
                 if c.tid == proc.pid and (c.local, c.remote) in active), None)


def _thread_label(proc: Rank, tid: int, with_tid: bool = False) -> str:
    """ "thread NAME" (with " (tid N)") of a rank's thread by its OS id, as py-spy named it,
    else "thread TID"."""
    names = {t.os_thread_id: t.name for x in proc.samples for t in x.threads or ()
             if t.os_thread_id is not None and t.name}
    if tid not in names:
        return f"thread {tid}"
    return f"thread {names[tid]}" + (f" (tid {tid})" if with_tid else "")


def _thread_moving_data(proc: Rank) -> tuple[BlockedCall, RecentConnection] | None:
    """A send or receive one of the rank's other threads sits in, on a connection that carried
    data in strace's window, when no other thread sits in one on a quiet connection (the one
    a main thread may be waiting for: exit_heartbeat_stuck's uploader, beside a heartbeat
    that sends); None otherwise."""
    recent = _windowed(proc)
    if recent is None:
        return None
    active: dict[tuple[str | None, str | None], RecentConnection] = {
        (c.local, c.remote): c for c in recent.active}
    others = [c for c in _socket_waits(proc) if c.tid != proc.pid]
    moving = [(c, active[(c.local, c.remote)]) for c in others if (c.local, c.remote) in active]
    if not moving or len(moving) < len(others):
        return None
    return moving[0]


# System calls only files take (a socket or a pipe refuses positional I/O and has nothing to
# sync): a rank writing a checkpoint shard by shard completes a few a second, a rank stuck in
# one (a hung mount) none. strace -c counts calls, not descriptors: read and write are also a
# socket's and a pipe's (a TCPStore poller makes dozens), so they do not count here.
STORAGE_SYSCALLS = frozenset({"fsync", "fdatasync", "pread64", "pwrite64", "preadv", "pwritev",
                              "preadv2", "pwritev2", "sync_file_range"})
STORAGE_CALLS = 2


def _file_calls(digest: RankDigest) -> int:
    """Successful file-only calls (syncs, positional reads and writes) strace counted in its
    window (0 without it)."""
    summary = digest.proc.strace
    if summary is None or summary.status != "ok":
        return 0
    return sum(max(0, c.calls - c.errors) for c in summary.syscalls
               if c.syscall in STORAGE_SYSCALLS)


def _moves_storage(digest: RankDigest) -> bool:
    """The rank reads or writes data: its I/O counters grew by WORKING_IO_RATE a second or more
    between its samples, or (one sample) strace counted STORAGE_CALLS file syncs or positional
    reads and writes that completed in its window (a checkpoint written shard by shard, each
    shard flushed). One sample of a rank that writes without either is not told from a stuck
    one."""
    if digest.io_rate is not None:
        return digest.io_rate >= WORKING_IO_RATE
    return _file_calls(digest) >= STORAGE_CALLS


def _program_on_a_thread(statuses: list[_Status]) -> list[_Status]:
    """Where the job runs its training on another thread than main (a trainer thread, the main
    one kept free for signals: its peers wait in their collectives through that thread), a
    main thread that joins a thread is where the thread it joins is: that thread's site, the
    first of the rank's threads in the job's own code (trainer_thread_queue). Where the peers
    wait on their main threads, a join is the program's own step and keeps its line (closing
    a writer thread that was never told to stop: writer_close_no_sentinel)."""
    names = {s.digest.side_collective[0] for s in statuses
             if s.on_a_thread and s.digest.side_collective is not None}
    if not names:
        return statuses
    out = []
    for s in statuses:
        if s.status == "blocked" and not s.ended and _joins_a_thread(s):
            # the thread of the role its peers wait through (the same program names its
            # threads alike on every rank), else its first thread in the job's code
            side = s.digest.side_threads
            text, site = next((t for t in side if any(t[0].startswith(f"{n} ") for n in names)),
                              side[0])
            s = replace(s, site=site, via=f"{text}; its main thread joins it at {s.site}")
        out.append(s)
    return out


def _through_a_thread(statuses: list[_Status]) -> list[_Status]:
    """A main thread idle on a lock while another of its threads works in the job's code and
    the process moves file data that the ranks waiting in a collective do not: the lock's
    holder is that thread, and the rank works through it (a checkpoint written on a thread
    holding the lock the weight update takes: rank0_async_save_lock). I/O that the ranks idle in
    a collective show as much of is the job's background, not the rank's progress: every
    rank's trace writer in lock_hang_busy_writer, whose stuck rank stays blocked. By the
    process's I/O counters between samples, else (one sample) by strace's completed file calls.
    """
    idle = [s for s in statuses if s.status == "waiting"]
    background_rate = max((s.digest.process_io_rate or 0.0 for s in idle), default=0.0)
    background_calls = max((_file_calls(s.digest) for s in idle), default=0)
    out = []
    for s in statuses:
        digest = s.digest
        # the working thread: one seen running, else, with one sample (which may catch the
        # writer inside its write or fsync, idle to py-spy), one in the job's own code
        single = digest.process_io_rate is None
        worker = (digest.busy_threads[0] if digest.busy_threads else
                  digest.side_threads[0][0] if single and digest.side_threads else None)
        if s.status == "blocked" and s.kind == "lock" and not s.ended and worker:
            if digest.process_io_rate is not None:
                moves = digest.process_io_rate >= max(WORKING_IO_RATE, 2 * background_rate)
            else:
                moves = _file_calls(digest) >= max(STORAGE_CALLS, 2 * background_calls)
            if moves:
                s = replace(s, status="busy", kind="storage",
                            via=f"its main thread waits on a lock while thread {worker} works")
        out.append(s)
    return out


def _slow_transfer(movers: list[_Status], waiting: list[_Status]) -> Verdict:
    """Ranks that move data while the others wait for them, not hung while it moves (info): a
    main thread in a send or receive on a connection that carries data (kind "transfer"; a
    quiet connection leaves it a straggler: http_no_timeout), or a rank whose file I/O
    advances (kind "storage": a checkpoint written by rank 0 while the others wait in a
    barrier, rank0_checkpoint_barrier; a rank stuck in one call moves nothing)."""
    ranks = [s.rank for s in movers]
    places = []
    for s in movers:
        moving = _moving_data(s.digest.proc)
        children = _children_moving_data(s.digest.proc) if s.kind == "child_transfer" else []
        threaded = (_thread_moving_data(s.digest.proc)
                    if s.kind == "transfer" and moving is None else None)
        if threaded is not None:
            call, connection = threaded
            who = _thread_label(s.digest.proc, call.tid)
            ago = min(connection.last_sent_ms, connection.last_received_ms)
            places.append(f"waiting at {s.site} for its {who}, in {call.call} on {call.local} "
                          f"-> {call.remote}, data {ago} ms before strace ended")
        elif s.kind == "transfer" and moving is not None:
            call, connection = moving
            ago = min(connection.last_sent_ms, connection.last_received_ms)
            places.append(f"in {call.call} on {call.local} -> {call.remote} at {s.site}, "
                          f"data {ago} ms before strace ended")
        elif children:
            child = children[0]
            command = " ".join(child.cmdline)[:120] or "?"
            if child.recent_traffic is not None and child.recent_traffic.active:
                link = child.recent_traffic.active[0]
                ago = min(link.last_sent_ms, link.last_received_ms)
                moves = (f"moves data on {link.local} -> {link.remote} ({ago} ms before the "
                         "look ended)")
            else:
                moves = (f"reads and writes {(child.io_rate or 0) / 1e6:.1f} MB/s (its I/O "
                         "counters over the look)")
            places.append(f"waiting at {s.site} for its child pid {child.pid} ({command})"
                          f"{_through(child)}, which {moves}")
        elif s.via is not None and s.digest.process_io_rate is not None:
            places.append(f"at {s.site}: {s.via}, reading and writing "
                          f"{s.digest.process_io_rate / 1e6:.1f} MB/s (the process's I/O "
                          "counters between samples)")
        elif s.via is not None:
            places.append(f"at {s.site}: {s.via}, completing {_file_calls(s.digest)} file "
                          "syncs or positional reads and writes in strace's window")
        elif s.digest.io_rate is not None:
            places.append(f"reading and writing {s.digest.io_rate / 1e6:.1f} MB/s (its I/O "
                          f"counters between samples) at {s.site}")
        else:
            places.append(f"completing {_file_calls(s.digest)} file syncs or positional reads "
                          f"and writes in strace's window at {s.site}")
    next_step = (
        "attach again later: while data moves the rank is only slow (a large upload, "
        "download or checkpoint, a throttled service or disk); if it stops moving with the "
        "rank still in the same call, its peer or its storage stopped: give the call a "
        "timeout, and check the mount (dmesg, df) or the service"
    )
    if all(s.via is not None for s in movers):
        # a lock's holder is not on any stack: the working thread (a checkpoint saved under
        # it: rank0_async_save_lock) or the main thread itself further up (lock_hang_own_writer)
        opening = "a slow phase or a hang, cannot tell"
        next_step = (
            "attach again later: a lock held by the thread that works is released when its "
            "work ends; one the main thread already holds further up its own stack (a "
            "non-reentrant lock taken twice) never is: if the main thread still waits at the "
            "same line, look for that (py-spy dump --locals --pid PID) and use an RLock or "
            "release the lock before the call"
        )
    else:
        opening = "a slow transfer, not hung while data moves"
    summary = (f"{opening}: {_ranks_label(ranks)} "
               f"{_verb(ranks, 'is', 'are')} {'; '.join(places)}, while "
               f"{_waiting_phrase(waiting)}")
    return Verdict(
        kind=VerdictKind.SLOW_STEP,
        severity="info",
        confidence="medium",
        summary=summary,
        culprit_ranks=tuple(ranks),
        sites=_unique(s.site for s in movers if s.site),
        evidence=(*[_proc_evidence(s) for s in movers[:8]],
                  *[line for s in movers[:4] for line in _call_evidence(s)],
                  *_group_evidence(waiting, limit=4)),
        next_step=next_step,
    )


def _call_evidence(s: _Status) -> list[str]:
    """Where the rank's threads sit in a send or receive, named by thread and connection, and
    whether that connection carried data in strace's window; then those that sit in a call on
    a file, named by its path (the mount that does not answer: stalled_mount_read)."""
    proc = s.digest.proc
    recent = _windowed(proc)
    active = {(c.local, c.remote) for c in recent.active} if recent is not None else None
    lines = []
    for c in _socket_waits(proc)[:3]:
        who = _thread_label(proc, c.tid, with_tid=True)
        line = f"rank {s.rank}: {who} in {c.call} on {c.local} -> {c.remote}"
        if active is not None and recent is not None:
            line += ("; data moved on it in strace's window" if (c.local, c.remote) in active
                     else f"; no data on it in the last {recent.within_ms / 1000:.1f} s")
        lines.append(line)
    files = [c for c in proc.blocked_calls if (c.target or "").startswith("/")]
    for c in files[:max(0, 3 - len(lines))]:
        fuse = f", {_BLOCK_PHRASES['fuse']}" if _wchan_hint(c.wchan) == "fuse" else ""
        lines.append(f"rank {s.rank}: {_thread_label(proc, c.tid, with_tid=True)} in {c.call} "
                     f"on {c.target}{fuse}")
    return lines


def _thread_on_fuse(s: _Status) -> bool:
    """A thread of the rank other than its main one waits in a call on a file of a FUSE file
    system that does not answer (its wchan; the main thread's own is the rank's)."""
    pid = s.digest.proc.pid
    return any(c.tid != pid and (c.target or "").startswith("/") and _wchan_hint(c.wchan) == "fuse"
               for c in s.digest.proc.blocked_calls)


def _finishing(statuses: list[_Status], missing: Sequence[int]) -> Verdict:
    """Every rank left has ended its program and works at exit (an upload, a final save in a
    non-daemon thread or an atexit handler): a job finishing looks the same as one retrying
    forever, for a look of a few seconds (info, low confidence; exit_slow_upload)."""
    ranks = [s.rank for s in statuses]
    working = [s for s in statuses if _works_at_exit(s)]
    busy = [s.rank for s in working]
    places = "; ".join(_unique(
        s.digest.side_threads[0][0] if s.digest.side_threads else f"{s.kind} at {s.site}"
        for s in working))
    summary = (
        f"finishing, or stuck at exit, cannot tell: {_ranks_label(ranks)} "
        f"{_verb(ranks, 'has', 'have')} ended {'its' if len(ranks) == 1 else 'their'} program, "
        f"and {_ranks_label(busy)} still {_verb(busy, 'moves', 'move')} "
        f"data or {_verb(busy, 'computes', 'compute')} at exit ({places})"
    )
    evidence = [_proc_evidence(s) for s in statuses[:8]]
    for s in working[:8]:
        recent = _windowed(s.digest.proc)
        if recent is not None and recent.active:
            c = recent.active[0]
            evidence.append(f"rank {s.rank}: data on {c.local} -> {c.remote} "
                            f"{min(c.last_sent_ms, c.last_received_ms)} ms before strace ended")
    if missing:
        evidence.append(f"{_ranks_label(missing)} {_verb(missing, 'has', 'have')} no process: "
                        "ended, most likely")
    return Verdict(
        kind=VerdictKind.SLOW_STEP,
        severity="info",
        confidence="low",
        summary=summary,
        culprit_ranks=tuple(s.rank for s in working),
        sites=_unique(s.site for s in working if s.site),
        evidence=tuple(evidence),
        next_step=(
            "attach again in a minute: a thread that moved on (or a process gone) was "
            "finishing; one in the same call, retrying, is stuck: give it a timeout"
        ),
    )


def _slow_input(inputs: list[_Status], waiting: list[_Status]) -> Verdict:
    """Ranks waiting for DataLoader workers that compute, the others waiting for them in a
    collective: an input pipeline slower than the step looks the same as a worker that never
    finishes, so it is said (info, low confidence), like a slow compute step (_slow_step). A
    rank whose workers are idle, blocked or gone stays a straggler (blocked_outside_collective,
    a deadlocked worker)."""
    ranks = [s.rank for s in inputs]
    sites = _unique(s.site for s in inputs)
    running = [(s, w) for s in inputs for w in (
        *_workers_running(s.digest.proc), *_workers_running(s.digest.proc, "child"))]
    pool = all(w.role == "child" for _, w in running) and bool(running)
    spawned = pool and not any(_in_pool(s.info) for s in inputs if s.info is not None)
    kind = "child process" if spawned else "pool worker" if pool else "DataLoader worker"
    kinds = "child processes" if spawned else f"{kind}s"
    workers = [
        f"rank {s.rank}: {kind} pid {w.pid} state {w.state or '?'}"
        + (f", {w.cpu_percent:.0f}% CPU" if w.cpu_percent is not None else "")
        + (f", in {site}" if (site := _worker_site(w)) else "")
        + (f": {' '.join(w.cmdline)[:160]}" if spawned and w.cmdline else "")
        for s, w in running
    ]
    what = ("a slow child process" if spawned else "a slow pool task" if pool
            else "a slow input pipeline")
    task = "a child's work" if spawned else "a pool task" if pool else "an input pipeline"
    if not running:  # a thread of its own computes (_thread_computes)
        kinds, what, task = "threads", "a slow worker thread", "a thread's work"
        workers = [f"rank {s.rank}: thread {s.digest.side_threads[0][0]} on a CPU, the process "
                   f"at {s.digest.proc.cpu_percent or 0:.0f}% CPU"
                   + (f"; a thread that computes holds the {held} its main thread waits on"
                      if (held := _producer_computes(s.digest)) else "")
                   for s in inputs if s.digest.side_threads]
    why = (
        f"{_ranks_label(ranks)} {_verb(ranks, 'waits', 'wait')} for {kinds} that run "
        f"on the CPU: {task} slower than the look is the same sight as one that never "
        "finishes; a dead, idle or blocked one is called a straggler"
    )
    summary = (
        f"{what} or a hang, cannot tell: {_ranks_label(ranks)} "
        f"{_verb(ranks, 'waits', 'wait')} for {'its' if len(ranks) == 1 else 'their'} {kinds}, "
        f"which compute, at {', '.join(sites[:3])} while {_waiting_phrase(waiting)}"
    )
    return Verdict(
        kind=VerdictKind.SLOW_STEP,
        severity="info",
        confidence="low",
        summary=summary,
        culprit_ranks=tuple(ranks),
        sites=sites,
        evidence=(*[_proc_evidence(s) for s in inputs[:8]], *workers[:8],
                  *_group_evidence(waiting, limit=4), why),
        next_step=(
            "attach again in a minute: a child that ended was only slow; one still running "
            "shows what it does with py-spy dump or strace -p on its pid; give the call that "
            "waits for it a timeout (subprocess.run(..., timeout=...))"
        ) if spawned else (
            "attach again in a minute: if the step counter moved, the input pipeline is only "
            "slow (more workers, lighter decoding); if every worker is still in the same "
            "function, py-spy dump --pid WORKER shows where it loops"
        ),
    )


def _worker_site(worker: WorkerProcess) -> str | None:
    """"function (file:line)" of the innermost frame of the job's own code in the worker's
    first sample."""
    for sample in worker.samples:
        for thread in sample.threads:
            for frame in thread.frames:
                if is_user_file(frame.file):
                    return f"{frame.function} ({frame_site(frame)})"
    return None


def _unsampled_straggler(unsampled: list[_Status], waiting: list[_Status]) -> Verdict:
    """Everyone waits in one collective except ranks py-spy could not read: suspect those."""
    ranks = [s.rank for s in unsampled]
    evidence = [_proc_evidence(s) for s in unsampled[:8]]
    for s in unsampled[:4]:
        errors = [e for e in s.digest.proc.errors] + [
            x.error for x in s.digest.proc.samples if x.error
        ]
        if errors:
            evidence.append(f"rank {s.rank}: {errors[0][:200]}")
    evidence.extend(_group_evidence(waiting, limit=4))
    return Verdict(
        kind=VerdictKind.STRAGGLER,
        severity="warning",
        summary=f"{_ranks_label(ranks)} could not be sampled while {_waiting_phrase(waiting)}: "
        f"{'it is' if len(ranks) == 1 else 'they are'} the likely culprit",
        culprit_ranks=tuple(ranks),
        sites=(),
        evidence=tuple(evidence),
        next_step=(
            "dump the rank by hand (py-spy dump --native --pid PID, or gdb -p PID) and read its "
            "state and wchan in /proc/PID: a process py-spy cannot read is often stuck in the "
            "kernel or in native code"
        ),
    )


def _unread(unsampled: list[_Status]) -> Verdict:
    """No stack of any rank to judge (every dump failed): said, not left silent (the analysis
    returned no stack verdict for such a look). Written for a CI failure it did not explain:
    that look had stacks, its second verdict ("progressing") hidden by a truncated message."""
    evidence = [_proc_evidence(s) for s in unsampled[:8]]
    for s in unsampled[:4]:
        errors = list(s.digest.proc.errors) + [x.error for x in s.digest.proc.samples if x.error]
        if errors:
            evidence.append(f"rank {s.rank}: {errors[0][:200]}")
    return Verdict(
        kind=VerdictKind.INCOMPLETE,
        severity="warning",
        summary=f"no stack could be read for {_ranks_label(s.rank for s in unsampled)}: the "
        "look says nothing about where the ranks are",
        evidence=tuple(evidence),
        next_step=(
            "attach again; if the dumps fail again, dump a rank by hand (py-spy dump --pid PID, "
            "or gdb -p PID) and read its state and wchan in /proc/PID"
        ),
    )


_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "tcsh", "csh", "fish", "env", "srun"})


def _not_started_there(snapshot: Snapshot, verdict: Verdict) -> Verdict:
    """A missing-rank verdict told where the job runs no Python process at all, only its
    step's tasks (the collector's role "task"): a wrapper still in a step before python
    (staging data, pulling a container, installing packages: staging_stalled). The ranks of
    such a node were most likely never started; what its tasks run is named. Unless the job's
    log says they crashed (their traceback, their exit code): then the wrapper is in a step
    after python (archiving the logs of a failed run: wrapper_upload_after_crash). A traceback
    of no rank (srun without --label) may be theirs or a handled one of another rank: both
    readings are said."""
    nodes = _task_nodes(snapshot)
    if not nodes or not verdict.culprit_ranks:
        return verdict
    places, lines, sites = _task_places(nodes)
    where = (f"no Python process runs on {compress_hostlist([n.name for n in nodes])}: "
             f"{', '.join(places)} in the job's step")
    before = _NOT_STARTED_YET
    after = ("a step of their wrapper after python (archiving logs, cleaning up) keeps the "
             "task alive, so srun never sees it end")
    ranks = set(verdict.culprit_ranks)
    theirs = [f for f in snapshot.log_findings
              if f.kind in ("task_exit", "traceback") and f.rank in ranks]
    unlabelled = [f for f in snapshot.log_findings if f.kind == "traceback" and f.rank is None]
    if theirs:
        summary = (f"{verdict.summary}; {where}, after its ranks ended (the job's log holds "
                   f"their crash: {theirs[0].text[:120]}): {after}")
    elif unlabelled:
        # A traceback no rank label ties to a rank may be theirs, or a handled one another
        # rank logged (logging.exception): both readings, the log's line named
        summary = (f"{verdict.summary}; {where}. The job's log holds a traceback no rank label "
                   f"ties to a rank ({unlabelled[0].text[:120]}): if it is theirs, its ranks "
                   f"started and crashed, and {after}; if not, they were most likely {before}")
    else:
        summary = (f"{verdict.summary.replace('no process (exited or crashed)', 'no process')}"
                   f"; {where}, its ranks most likely {before}")
    # where the wrapper waits is the culprits' place (their ranks have no stack of their own)
    verdict = replace(verdict, summary=summary, evidence=(*lines, *verdict.evidence),
                      sites=verdict.sites or (sites if not (theirs or unlabelled) else ()))
    working = _tasks_working(nodes)
    if working and not (theirs or unlabelled):
        return _staging_works(verdict, working)
    return verdict


def _tasks_working(nodes: Sequence[Node]) -> list[str]:
    """What the wrapper's tasks on these nodes do while they run: each task that uses CPU
    (WORKING_CPU) or reads and writes files at CHILD_IO_RATE or more over the look (a copy, a
    download, an unpack). Empty when every task waits (a sleep, a stalled read)."""
    found = []
    for node in nodes:
        for p in node.other_processes:
            if p.role != "task":
                continue
            cpu = (p.cpu_percent or 0.0) / 100
            rate = p.io_rate or 0
            if cpu >= WORKING_CPU or rate >= CHILD_IO_RATE:
                name = p.cmdline[0].rsplit("/", 1)[-1] if p.cmdline else f"pid {p.pid}"
                found.append(f"{node.name}'s `{name}` at {cpu:.0%} CPU, "
                             f"{rate / (1 << 20):.1f} MiB/s of file I/O")
    return found


def _staging_works(verdict: Verdict, working: list[str]) -> Verdict:
    """A hang verdict about a wrapper's step before its ranks (or launcher) start, told that
    the step still works (healthy_slow_staging: a copy throttled to 1 MB/s): a slow start or a
    hang, cannot tell (info), what works named. What would make this lie: a step that works
    for ever (a download retried in a loop at full speed): "cannot tell" on a hang, the nodes
    and the line still named."""
    return replace(
        verdict,
        kind=VerdictKind.SLOW_STEP,
        severity="info",
        summary=(f"a slow start or a hang, cannot tell: {verdict.summary}; but the step still "
                 f"works ({'; '.join(working[:3])})"),
        next_step=NEXT_STEPS["staging_works"],
    )


_NOT_STARTED_YET = ("not started yet (a step before python that has not ended: staging data, a "
                    "container, an install)")


def _task_nodes(snapshot: Snapshot) -> list[Node]:
    """Nodes that answered with no rank and no launcher, only their step's tasks (the
    collector's role "task": a wrapper's shell and what it runs)."""
    return [n for n in snapshot.nodes if n.status == NodeStatus.OK and not n.ranks
            and any(p.role == "task" for p in n.other_processes)
            and not any(p.role == "agent" for p in n.other_processes)]


def _task_places(nodes: Sequence[Node]) -> tuple[list[str], list[str], tuple[str, ...]]:
    """For each node of _task_nodes: what its tasks run ("node002 runs `sleep 3600` at
    run.sh:9"), the tasks as evidence lines, and the script lines they wait at (sites)."""
    places: list[str] = []
    lines: list[str] = []
    sites: list[str] = []
    for node in nodes:
        tasks = [p for p in node.other_processes if p.role == "task"]
        doing = next((p for p in reversed(tasks)
                      if p.cmdline and p.cmdline[0].rsplit("/", 1)[-1] not in _SHELLS), tasks[-1])
        command = " ".join(doing.cmdline)[:120] or f"pid {doing.pid}"
        at = next((p.script_line for p in tasks if p.script_line), None)
        places.append(f"{node.name} runs `{command}`" + (f" (at {at})" if at else ""))
        if at:
            sites.append(at)
        lines.extend(f"{node.name}: task pid {p.pid} ({p.state or '?'}): "
                     f"{' '.join(p.cmdline)[:160]}" for p in tasks[:6])
    return places, lines, _unique(sites)


def _missing(
    dead: list[_Status], missing: Sequence[int], waiting: list[_Status], others: list[_Status],
    asked: int | None = None,
) -> Verdict:
    """``asked``: the world the ranks asked init_process_group for, larger than the processes
    the job started (world_size_overcount): the missing ranks were never started."""
    culprits = sorted({s.rank for s in dead} | set(missing))
    parts = []
    if missing and asked is not None:
        parts.append(
            f"{_ranks_label(missing)} of the world of {asked} that the ranks asked "
            f"init_process_group for {_verb(missing, 'has', 'have')} no process: never "
            "started (the world size given does not match the processes the job runs)"
        )
    elif missing:
        parts.append(
            f"{_ranks_label(missing)} {_verb(missing, 'has', 'have')} no process "
            "(exited or crashed)"
        )
    if dead:
        parts.append(
            f"{_ranks_label(s.rank for s in dead)} {_verb([s.rank for s in dead], 'is a', 'are')} "
            f"zombie{'' if len(dead) == 1 else 's'} (exited, not reaped)"
        )
    tail = f" while {_waiting_phrase(waiting)}" if waiting else ""
    summary = " and ".join(parts) + tail
    evidence = [_proc_evidence(s) for s in dead[:8]]
    if waiting:
        evidence.extend(_group_evidence(waiting, limit=4))
    if others:
        evidence.extend(_group_evidence(others, limit=4))
    return Verdict(
        kind=VerdictKind.MISSING_RANK,
        severity="critical",
        summary=summary,
        culprit_ranks=tuple(culprits),
        # the call that asked for them, where the ranks wait
        sites=_unique(s.site for s in waiting) if asked is not None else (),
        evidence=tuple(evidence),
        next_step=NEXT_STEPS["world_size"] if asked is not None else NEXT_STEPS["missing_rank"],
    )


def _launchers_in_rendezvous(snapshot: Snapshot) -> list[tuple[str, WorkerProcess, Frame]]:
    """(node, agent, frame) of launcher agents whose stack is in an elastic rendezvous."""
    found = []
    for node in snapshot.nodes:
        for proc in node.other_processes:
            if proc.role != "agent":
                continue
            for sample in proc.samples[:1]:
                frames = [
                    f
                    for t in sample.threads
                    for f in t.frames
                    if "/elastic/rendezvous/" in f.file
                    or f.function.rsplit(".", 1)[-1] in ("next_rendezvous", "_rendezvous")
                ]
                # the handler's next_rendezvous names the wait better than a retry helper
                named = [f for f in frames if f.function.endswith("next_rendezvous")]
                if frames:
                    found.append((node.name, proc, (named or frames)[0]))
    return found


_NNODES_RE = re.compile(r"^--nnodes(?:=(.*))?$")


def _nnodes(cmdline: Sequence[str]) -> tuple[int, str] | None:
    """(the fewest nodes a torchrun-style agent's rendezvous waits for, as given) from its
    ``--nnodes N``, ``--nnodes=N`` or ``--nnodes=MIN:MAX``; None without one."""
    for index, arg in enumerate(cmdline):
        found = _NNODES_RE.match(arg)
        if found is None:
            continue
        given = found.group(1)
        if given is None:
            given = cmdline[index + 1] if index + 1 < len(cmdline) else ""
        low = given.split(":", 1)[0]
        return (int(low), given) if low.isdigit() else None
    return None


def _launchers_waiting(
    snapshot: Snapshot, waiting: list[tuple[str, WorkerProcess, Frame]]
) -> Verdict:
    nodes = [name for name, _, _ in waiting]
    silent = [n.name for n in snapshot.nodes if n.status == NodeStatus.OK and n.name not in nodes]
    frame = waiting[0][2]
    evidence = [
        f"{name}: pid {proc.pid} {' '.join(proc.cmdline)[:200]}" for name, proc, _ in waiting[:6]
    ]
    if silent:
        evidence.append(f"no launcher in a rendezvous on {compress_hostlist(silent)}")
    why = "for nodes that never join"
    # nodes whose step runs only a wrapper's tasks: their launcher is not started yet
    unstarted = [n for n in _task_nodes(snapshot) if n.name in silent]
    places, lines, sites = _task_places(unstarted)
    evidence.extend(lines)
    asked = {_nnodes(proc.cmdline) for _, proc, _ in waiting}
    job_nodes = len(snapshot.job.nodes) or len(snapshot.nodes)
    only = next(iter(asked)) if len(asked) == 1 else None  # every agent the same --nnodes
    if only is not None and only[0] > job_nodes:
        why = (f"for {only[0]} nodes (their --nnodes={only[1]}) in a job of {job_nodes}: "
               f"{only[0] - job_nodes} of them can never join")
    crashed = [f for f in snapshot.log_findings if f.kind == "traceback"]
    if unstarted:
        there = compress_hostlist([n.name for n in unstarted])
        why += f"; no launcher runs on {there}: {', '.join(places)} in the job's step"
        if crashed:
            # a launcher that started and failed, its wrapper in a step after it, looks the
            # same: both readings, the log's line named
            why += (f". The job's log holds a traceback ({crashed[0].text[:120]}): if it is "
                    f"the launcher's on {there}, it started and failed, and a step of its "
                    f"wrapper after it keeps the task alive; if not, it is most likely "
                    f"{_NOT_STARTED_YET}")
        else:
            why += f", its launcher most likely {_NOT_STARTED_YET}"
    verdict = Verdict(
        kind=VerdictKind.NO_RANKS,
        severity="critical",
        summary=(
            f"no rank has started: the launchers on {compress_hostlist(nodes)} wait in their "
            f"rendezvous ({frame.function} at {frame.file}:{frame.line}) {why}"
        ),
        culprit_ranks=(),
        # where the missing nodes' wrappers wait first: that is what holds the others
        sites=_unique((*sites, f"{frame.file}:{frame.line}")),
        evidence=tuple(evidence),
        next_step=NEXT_STEPS["launcher_not_started" if unstarted else "launcher_rendezvous"],
    )
    working = [] if crashed else _tasks_working(unstarted)
    return _staging_works(verdict, working) if working else verdict


def _all_waiting(waiting: list[_Status], severity: str, kind_note: str) -> Verdict:
    head = waiting[0]
    ranks = [s.rank for s in waiting]
    if head.status == "waiting" and head.op in STARTUP_OPS:
        return Verdict(
            kind=VerdictKind.ALL_WAITING,
            severity=severity,
            summary=(
                f"every known rank ({format_int_ranges(ranks)}) waits in {head.op} at "
                f"{head.site}: the process group never formed (rendezvous)"
            ),
            culprit_ranks=(),
            sites=_unique([head.site]),
            evidence=tuple(_group_evidence(waiting)),
            next_step=NEXT_STEPS["rendezvous"],
        )
    if head.status == "waiting":
        summary = (
            f"every known rank ({format_int_ranges(ranks)}) waits in {head.op} at {head.site}: "
            "the cause is below Python (network, GPU, or an earlier collective out of order)"
        )
    else:
        summary = (
            f"every known rank ({format_int_ranges(ranks)}) is stuck at the same place, "
            f"{_where(head)}{kind_note}"
        )
    next_step = NEXT_STEPS["all_waiting"]
    if all(s.kind == "stopped" for s in waiting):
        # nothing below Python: the whole job was stopped (scancel --signal=STOP, a freezer)
        next_step = (
            "every rank is stopped (a SIGSTOP sent to the whole job: scancel --signal=STOP, "
            "^Z, a cgroup freezer): nothing runs; resume it with scancel --signal=CONT JOBID"
        )
    return Verdict(
        kind=VerdictKind.ALL_WAITING,
        severity=severity,
        summary=summary,
        culprit_ranks=(),
        sites=_unique([head.site]),
        evidence=tuple(_group_evidence(waiting)),
        next_step=next_step,
    )


def _failed_connects(proc: Rank) -> tuple[int, int, float]:
    """(failed, made, window) of the rank's connect() calls in strace's window; zeros without
    strace."""
    summary = proc.strace
    if summary is None or summary.status != "ok":
        return (0, 0, 0.0)
    calls = [c for c in summary.syscalls if c.syscall == "connect"]
    return (sum(c.errors for c in calls), sum(c.calls for c in calls), summary.window_s)


def _reached_a_rank(statuses: list[_Status]) -> set[int]:
    """The ranks holding an established connection to a port a rank listens on (the store, a
    gloo peer), or to MASTER_PORT, and the ranks listening there: they met another rank."""
    listeners: dict[str, set[int]] = {}  # port -> the ranks listening on it
    for s in statuses:
        for c in s.digest.proc.connections:
            if c.state == "LISTEN":
                listeners.setdefault(_port(c.local), set()).add(s.rank)
        if s.digest.proc.env.get("MASTER_PORT"):  # a launcher's store: no rank listens there
            listeners.setdefault(s.digest.proc.env["MASTER_PORT"], set())
    reached: set[int] = set()
    for s in statuses:
        for c in s.digest.proc.connections:
            if c.state == "ESTABLISHED" and _port(c.remote) in listeners:
                reached.add(s.rank)
                reached |= listeners[_port(c.remote)]  # whoever listens there was reached too
    return reached


def _between_attempts(statuses: list[_Status]) -> list[_Status]:
    """Ranks asleep in the very function from which other ranks wait in a start-up op
    (init_process_group), that met another rank (an established connection to the store or a
    peer, or listening where one is connected): between two attempts of a rendezvous they
    retry; they wait in it as the others do (stale_port_retry_init: rank 1, asleep in the
    wrapper's back-off in all three samples, still connected to rank 0's store, was blamed).
    What would make it lie: a rank asleep before its first attempt (waiting for a file), with a
    connection of that function's making to a rank: it has not reached the rendezvous yet."""
    entered: dict[tuple[str, str], _Status] = {}
    for s in statuses:
        if s.status == "waiting" and s.op in STARTUP_OPS and s.info and s.info.top_user_frame:
            f = s.info.top_user_frame
            entered.setdefault((f.file, f.function), s)
    if not entered:
        return statuses
    reached = _reached_a_rank(statuses)
    out = []
    for s in statuses:
        top = s.info.top_user_frame if s.info else None
        at = entered.get((top.file, top.function)) if top is not None else None
        if (at is not None and s.status == "blocked" and s.kind in ("sleep", "poll")
                and s.rank in reached and _measured_work(s.digest) is not True):
            s = replace(s, status="waiting", kind="collective", site=at.site, op=at.op,
                        position=at.position, info=at.info)
        out.append(s)
    return out


# The frames of a rendezvous that makes (or connects to) the job's store.
_STORE_MAKING = frozenset({"_create_c10d_store", "_env_rendezvous_handler",
                           "_tcp_rendezvous_handler", "rendezvous", "_rendezvous_helper"})


def _past_the_store(s: _Status) -> bool:
    """In init_process_group past its store's making (in gloo's mesh connect): the rank met the
    store, whatever its sockets say now (stale_port_retry_init: rank 1's store was closed by
    its host, whose attempt had timed out; rank 1 was taken for one that never reached it)."""
    frames = s.info.frames if s.info is not None else ()
    return (s.op == "init_process_group"
            and not any(f.function.rsplit(".", 1)[-1] in _STORE_MAKING for f in frames))


def _not_joined(waiting: list[_Status]) -> list[_Status]:
    """Ranks in a start-up wait that never reached any other rank: no established connection to
    a port a rank listens on (the store, a gloo peer), none to theirs, while other ranks of the
    rendezvous hold such connections (stale_port_node: node 1's ranks knocked at a stale
    MASTER_PORT, refused; rank 0 waited for them in the store's constructor, at the very line
    of theirs, rank 1 in gloo's mesh: by stacks "every rank waits in init_process_group").
    What would make it lie: a rank whose sockets were not read (its descriptors unreadable:
    not judged; a collector that failed to read any socket of a node would make its ranks
    look alone), a rank between two connection attempts of a healthy start (a look
    lasts seconds; a healthy store connect takes milliseconds), a rendezvous that goes
    through a launcher's store (torchrun's agent: MASTER_PORT names it, its connections count).
    None of the rendezvous joined (a wrong address for all): every rank waits, no culprit."""
    reached = _reached_a_rank(waiting) | {s.rank for s in waiting if _past_the_store(s)}
    # a rank with no socket at all is judged too: torch's store client closes its socket
    # between attempts and sleeps a backoff that grows past strace's window (store_unreachable:
    # no socket, no connect() in 2 s); only a rank whose descriptors could not be read is not
    judged = [s for s in waiting
              if s.digest.proc.connections or _failed_connects(s.digest.proc)[1]
              or not any("/fd" in e for e in s.digest.proc.errors)]
    alone = [s for s in judged if s.rank not in reached]
    return alone if alone and reached else []


def _unjoined_straggler(alone: list[_Status], joined: list[_Status], severity: str) -> Verdict:
    ranks = [s.rank for s in alone]
    head = alone[0]
    evidence = []
    for s in alone[:8]:
        tried = _failed_connects(s.digest.proc)
        sockets = ", ".join(f"{c.local} {c.state}" for c in s.digest.proc.connections[:3])
        line = f"rank {s.rank}: no established connection to any rank ({sockets or 'no socket'})"
        if tried[0]:
            line += f"; {tried[0]} of {tried[1]} connect() calls failed in {tried[2]:.1f} s of strace"
        line += _connect_phrase(s.digest.proc)  # a connect nothing answers (a firewall)
        evidence.append(line)
    evidence.extend(_group_evidence(joined, limit=4))
    for var in ("MASTER_ADDR", "MASTER_PORT"):
        seen = _group_by((s for s in joined + alone if s.digest.proc.env.get(var)),
                         lambda s, var=var: s.digest.proc.env[var])
        if len(seen) > 1:
            evidence.append(f"{var} differs: " + "; ".join(
                f"{_ranks_label(o.rank for o in group)} {value}" for value, group in seen.items()))
    confidence = None
    if len(alone) >= len(joined):
        # the rendezvous's host may be the odd one (its node's address or port the stale one:
        # stale_port_host), and a refused connect() leaves no trace of the port it aimed at
        confidence = "medium"
        evidence.append(
            f"unsure which side is wrong: as many ranks or more cannot reach the store as joined it; "
            f"the address or port that {_ranks_label(s.rank for s in joined)} met at may be "
            "the wrong one (the store's host took it from its own node)")
    failing = any(_failed_connects(s.digest.proc)[0] for s in alone)
    why = ("their connect() calls fail" if failing
           else "nothing answers their connection requests"
           if any(_connects(s.digest.proc) for s in alone) else "they hold no connection to it")
    return Verdict(
        kind=VerdictKind.STRAGGLER,
        severity=severity,
        summary=(
            f"{_ranks_label(ranks)} never reached the rendezvous: {_verb(ranks, 'it waits', 'they wait')} "
            f"in {head.op} at {head.site} with no connection to the job's store or to any rank "
            f"({why}), while {_ranks_label(s.rank for s in joined)} joined and "
            f"{_verb([s.rank for s in joined], 'waits', 'wait')} for {_verb(ranks, 'it', 'them')}"
        ),
        culprit_ranks=tuple(ranks),
        sites=_unique(s.site for s in alone),
        evidence=tuple(evidence),
        confidence=confidence,
        next_step=(
            "these ranks cannot reach the store the others met at: compare MASTER_ADDR and "
            "MASTER_PORT (or the rendezvous endpoint) as their node sees them with the others' "
            "(a node's profile or module file exporting another value, a name that resolves "
            "elsewhere there), and check that the address is reachable from their node "
            "(firewall, interface: GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME)"
        ),
    )


#: A connection counts as stalled once no acknowledgement came for this long: a loss that
#: recovers (congestion, a drop now and then) is acknowledged within a few RTOs (200 ms each).
STALL_MS = 1000


def _stalled_links(statuses: list[_Status]) -> list[tuple[_Status, StalledConnection, _Status]]:
    """(rank, its stalled connection, the rank at the far end) for each connection between two
    ranks that holds data unacknowledged for STALL_MS or more, retransmitted on timeout
    (link_blackholed: every rank in one all_reduce, the stacks all alike, the NICs up; node 3
    dropped what it sent to node 4, and rank 3's data to rank 2 waited for an acknowledgement
    for ever). What would make it lie: a peer whose host stopped answering (a dead node: its
    ranks are missing, the missing-rank verdict comes first), a stall to something that is not
    a rank (a storage server: not counted here), a loss that recovers (under STALL_MS)."""
    owner = _endpoint_owners(statuses)
    links = []
    for s in statuses:
        recent = s.digest.proc.recent_traffic
        for stall in recent.stalled if recent is not None else ():
            peer = owner.get(_endpoint_key(s, stall.remote))
            if peer is not None and peer is not s and stall.last_ack_ms >= STALL_MS:
                links.append((s, stall, peer))
    return links


def _link_phrase(links: list[tuple[_Status, StalledConnection, _Status]]) -> tuple[str, list[str]]:
    """("the network between node003 and node004 loses packets", evidence lines)."""
    pairs = dict.fromkeys(tuple(sorted((a.digest.node, b.digest.node))) for a, _, b in links)
    between = "; ".join(f"{x} and {y}" if x != y else f"{x} (within the node)" for x, y in pairs)
    evidence = [
        f"rank {a.rank} ({a.digest.node}) -> rank {b.rank} ({b.digest.node}): {c.unacked} "
        f"segment{'s' if c.unacked != 1 else ''} unacknowledged on {c.local} -> {c.remote}, "
        f"retransmitted {c.retransmits} time{'s' if c.retransmits != 1 else ''} (RTO backoff "
        f"{c.backoff}), no acknowledgement for {c.last_ack_ms / 1000:.1f} s"
        for a, c, b in links[:6]
    ]
    return f"the network between {between} loses packets", evidence


def _stalled_network(verdict: Verdict, statuses: list[_Status],
                     links: list[tuple[_Status, StalledConnection, _Status]]) -> Verdict:
    """Every rank at one place (all_waiting) and a link between two of them holds data that
    is never acknowledged: the network is to blame, at that link."""
    phrase, evidence = _link_phrase(links)
    ranks = sorted({s.rank for a, _, b in links for s in (a, b)})
    head = statuses[0]
    where = f"waits in {_where(head)}" if head.status == "waiting" else f"is {_where(head)}"
    return replace(
        verdict,
        summary=f"every known rank ({format_int_ranges(s.rank for s in statuses)}) {where}: "
        f"{phrase} (data between {_ranks_label(ranks)} sent and never acknowledged)",
        culprit_ranks=tuple(ranks),
        evidence=tuple(evidence) + verdict.evidence,
        next_step=NEXT_STEPS["stalled_link"],
    )


def _stack_where(info: StackInfo) -> str:
    return f"{info.op} at {info.site}" if info.op else f"{info.kind} at {info.site}"


def _progressing(
    merge: StackMerge, statuses: list[_Status], movers: list[_Status], layout: _Layout
) -> Verdict:
    moving = [s for s in statuses if s.status in ("moving", "busy") and not s.digest.stationary]
    sampled = [s for s in statuses if len(s.digest.stack_ids) > 1]
    if movers:
        why = (
            f"{_ranks_label(s.rank for s in movers)} went in or out of a collective between samples"
        )
    else:
        why = f"{len(moving)} of {len(sampled)} ranks changed stack between samples"
    evidence = []
    for s in (movers or moving)[:4]:
        steps = [_stack_where(merge.table[sid]) for sid in dict.fromkeys(s.digest.stack_ids)]
        evidence.append(f"rank {s.rank}: " + " -> ".join(steps))
    if layout.missing:
        evidence.append(f"{_ranks_label(layout.missing)} not found in the snapshot")
    return Verdict(
        kind=VerdictKind.PROGRESSING,
        severity="info",
        summary=f"the job is progressing, not hung: {why}",
        culprit_ranks=(),
        sites=(),
        evidence=tuple(evidence),
        next_step=NEXT_STEPS["progressing"],
    )


def _traffic(digest: RankDigest) -> int | None:
    """Successful network send/receive calls strace counted in its window, None without strace."""
    summary = digest.proc.strace
    if summary is None or summary.status != "ok":
        return None
    return sum(
        max(0, c.calls - c.errors) for c in summary.syscalls if c.syscall in TRANSFER_SYSCALLS
    )


def _port(endpoint: str) -> str:
    return endpoint.rpartition(":")[2]


def _store_ports(ranks: list[Rank]) -> frozenset[str]:
    """The ports of the job's stores: MASTER_PORT where the ranks' environment has it, and any
    port one rank listens on that every rank, its own included, holds a connection to (a job
    may set MASTER_PORT in Python, after its environment was read, or open a store of its own;
    gloo's listeners are connected by the other ranks only, never by their own; any service a
    rank hosts for every rank is taken as a store too: its traffic is not collectives). What
    neither names (connections not listed: a rank's over the 300 listed) is not known."""
    named = {r.env["MASTER_PORT"] for r in ranks if r.env.get("MASTER_PORT")}
    listening = {_port(c.local) for r in ranks for c in r.connections if c.state == "LISTEN"}
    common: set[str] | None = None
    for r in ranks:
        if r.connections:
            remote = {_port(c.remote) for c in r.connections if c.state == "ESTABLISHED"}
            common = remote if common is None else common & remote
    hosted = (common or set()) & listening if len(ranks) > 1 else set()
    return frozenset(named | hosted)


def _rank_endpoints(ranks: list[Rank]) -> tuple[frozenset[str], frozenset[str]]:
    """(the ranks' socket endpoints, the ports they listen on at any address): what a
    connection between two ranks has at its far end. A rank's listeners are always listed
    (the collector lists them first), so of a gloo pair's two ends one always matches."""
    ends = {c.local for r in ranks for c in r.connections}
    anywhere = {_port(c.local) for r in ranks for c in r.connections
                if c.state == "LISTEN" and c.local.rpartition(":")[0] in ("0.0.0.0", "[::]")}
    return frozenset(ends), frozenset(anywhere)


def _collective_traffic(digest: RankDigest, store: frozenset[str],
                        ranks: tuple[frozenset[str], frozenset[str]]) -> bool | None:
    """Whether a connection between this rank and another one (``ranks``: _rank_endpoints),
    other than to the job's store (``store``: its ports, either end), carried data during the
    strace window; None when the connections were not read again then (no strace, sockets read
    from the text table, an older snapshot). strace -c counts a rank's sends and receives on any
    socket: a store's host answering ranks that poll it (store_poll_host) and a thread
    uploading a checkpoint (uploader_during_hang) were counted as much as collectives
    completing, two hangs called progressing. What would make this lie: a job that moves its
    data through the store itself, or a store whose port neither MASTER_PORT nor the
    connections name; with no endpoint of any rank known, any connection but the store's
    counts.
    """
    return _rank_traffic(_windowed(digest.proc), store, ranks)


def _rank_traffic(recent: RecentTraffic | None, store: frozenset[str],
                  ranks: tuple[frozenset[str], frozenset[str]], within_ms: int | None = None
                  ) -> bool | None:
    """_collective_traffic's test on ``recent``'s connections, those that carried data in the
    last ``within_ms`` only when given."""
    if recent is None or not recent.checked:
        return None
    ends, anywhere = ranks
    return any(
        _port(c.local) not in store and _port(c.remote) not in store
        and (not ends or c.remote in ends or _port(c.remote) in anywhere)
        and (within_ms is None or min(c.last_sent_ms, c.last_received_ms) <= within_ms)
        for c in recent.active
    )


#: A look without strace: a rank whose connections to other ranks carried data this long before
#: its end (tcp_info) completes collectives (ms); a healthy step's move data every few hundred ms.
LOOK_MOVED_MS = 250


def _talking_in_the_look(statuses: list[_Status], store: frozenset[str],
                         ranks: tuple[frozenset[str], frozenset[str]]) -> tuple[list[_Status], int]:
    """(the ranks whose connections to other ranks carried data in the last LOOK_MOVED_MS of a
    look without strace, out of how many were read so): a one-sample look's sign that the
    collectives complete, the way strace's window is for a longer one. A rank at a start-up op
    in every sample (_forming) does not count, nor does a store's traffic."""
    looked = [s for s in statuses if s.kind != "peer" and s.digest.proc.recent_traffic is not None
              and s.digest.proc.recent_traffic.read_at == "look"]
    talking = [s for s in looked if not _forming(s)
               and _rank_traffic(s.digest.proc.recent_traffic, store, ranks, LOOK_MOVED_MS)]
    return talking, len(looked)


def _forming(s: _Status) -> bool:
    """Waiting at a start-up op (init_process_group, a rendezvous, new_group) in every sample:
    no process group of this rank formed, so none of its send and receive calls completed a
    collective; they are the rendezvous's own (a store handshake retried, the names looked up
    for it). Found in CI: two ranks whose MASTER_ADDR led to a server that answered the store's
    handshake wrongly retried it every ~10 s, 10 calls a rank in strace's 1 s, and the job that
    never formed was called progressing. What would make this lie: a rank whose other threads
    run collectives of a group formed earlier while its main thread waits in new_group: its
    calls are not counted, so the other ranks' must make the majority of every traced rank."""
    return s.status == "waiting" and s.op in STARTUP_OPS and s.digest.settled


def _data_between_ranks(s: _Status, store: frozenset[str],
                        ranks: tuple[frozenset[str], frozenset[str]]) -> bool:
    """Whether a connection of the rank to another rank (not the store) carried data in what
    the traffic rules read: strace's window (_collective_traffic), or a look's last
    LOOK_MOVED_MS (_talking_in_the_look's test)."""
    recent = s.digest.proc.recent_traffic
    if recent is not None and recent.read_at == "look":
        return bool(_rank_traffic(recent, store, ranks, LOOK_MOVED_MS))
    return bool(_collective_traffic(s.digest, store, ranks))


#: How long a gloo group's workers must have slept (ms) for its collectives to be known to
#: complete nothing: a collective's data comes in chunks, read by the group's loop thread, and
#: a worker wakes when one is whole (healthy_metrics_group's 8-MB chunks: one-sample looks saw
#: its default group's workers asleep for their ~0.1 s while the data flowed). strace's
#: default window is 2 s.
GLOO_ASLEEP_MS = 1500


def _default_group_slept(s: _Status, groups: GroupView) -> bool:
    """A rank waiting in a collective on the default group whose gloo workers slept through the
    time its connections' data was read for, GLOO_ASLEEP_MS at least (``recent_traffic``'s
    ``gloo_ran``, the groups in the order they were made, the default one first): strace's
    window; a look without strace, from its dump (which wakes every thread) to its end, and
    ``gloo_idle_ms`` before it. A collective that completes wakes its group's workers, so
    whatever data moved then was not that collective's. Found with heartbeat_group_hang: every
    rank's health thread all_reduces on a second group ten times a second while the main
    threads hang, and both traffic rules called the job progressing; side_channel_hang is the
    same with a liveness ring of plain TCP connections between the ranks (one gloo group).
    gloo runs a group's collectives on its workers, but a send or receive (and
    monitored_barrier, made of them) on the calling thread: a rank waiting in one is not
    judged. Only the default group is placed (made first); a collective on another group, or
    one whose group the locals do not say (DDP's, from autograd), is not judged. What would
    make this lie: a default group made after another gloo group (TORCH_GLOO_LAZY_INIT; a job
    whose default group is NCCL's and its gloo groups side ones: not judged on nodes with
    GPUs). Its liar as a job: healthy_metrics_group (a large all_reduce on the default group
    beside an idle metrics group): a look's ~0.1 s saw its workers asleep while a chunk came
    in, a false alarm before the idle time before the look was read. Not caught: a look begun
    less than GLOO_ASLEEP_MS after an earlier dump (a second attach at once), or without
    ``gloo_idle_ms`` (a kernel without CONFIG_SCHED_DEBUG's sched files)."""
    recent, traced = s.digest.proc.recent_traffic, s.digest.proc.strace
    if not (s.status == "waiting" and s.kind == "collective" and s.op not in _P2P_OPS
            and s.op != "monitored_barrier" and groups.collective.get(s.rank) == WORLD
            and recent is not None and recent.gloo_ran and not recent.gloo_ran[0]):
        return False
    if recent.read_at == "look":
        return bool(recent.gloo_idle_ms) and recent.gloo_idle_ms[0] >= GLOO_ASLEEP_MS
    return traced is not None and traced.window_s * 1000 >= GLOO_ASLEEP_MS


def _main_slept(s: _Status) -> bool:
    """The rank's main thread was not put on a CPU for the time its connections' data was read
    for, GLOO_ASLEEP_MS at least (``recent_traffic``'s ``main_ran``, read as ``gloo_ran``
    is: strace's window; a look without strace, from its dump to its end, and
    ``main_idle_ms`` before it)."""
    recent, traced = s.digest.proc.recent_traffic, s.digest.proc.strace
    if recent is None or recent.main_ran is not False:
        return False
    if recent.read_at == "look":
        return recent.main_idle_ms is not None and recent.main_idle_ms >= GLOO_ASLEEP_MS
    return traced is not None and traced.window_s * 1000 >= GLOO_ASLEEP_MS


def _p2p_stranded(s: _Status, by_rank: dict[int, _Status]) -> bool:
    """A rank waiting in a send or receive (its main thread's, the peer read from its locals)
    whose main thread slept through the time its connections' data was read for (_main_slept),
    as did its peer's, the peer not in the matching call (a receive from it, a send to it):
    neither side could complete the call then, so whatever data the rank's connections moved
    was not its. gloo runs a send or a receive on the calling thread, which wakes when it
    completes. Found with pipeline_heartbeat_hang (a pipeline's last stage blocked in a
    queue, the other stages in their sends and receives, every rank's health thread
    all_reducing on a second group): `progressing` in every mode, the send and receive ranks
    being what _default_group_slept does not judge. Its liars: a transfer longer than the
    window (both sides asleep in matching calls while the data flows: kept), a slow pipeline
    whose stage waits seconds for a stage that computes (the peer runs: kept)."""
    named = _peer_of(s) if s.status == "waiting" and s.op in _PEERED else None
    peer = by_rank.get(named) if named is not None else None
    if peer is None or peer is s or not (_main_slept(s) and _main_slept(peer)):
        return False
    if peer.status != "waiting" or peer.op not in _PEERED:
        return True
    return not (peer.op != s.op and _peer_of(peer) in (s.rank, None))


# Kernel waits outside the network: a pipe, a network or local file system, a disk.
_OFF_NETWORK_WCHAN = ("pipe", "nfs", "rpc_", "io_schedule", "wait_on_page", "folio_wait",
                      "request_wait_answer")


def _stuck_off_network(s: _Status) -> bool:
    """Blocked for the whole look outside any network wait: the same stack in every sample (two
    at least), no measured work (CPU, I/O), the kernel waiting on a pipe, a file system or a
    disk (or state D), and the main thread's read and written bytes still between its last two
    samples. The job's sockets may carry traffic meanwhile (its other threads, the store it
    hosts), but this rank makes no progress, and the others' collectives need it: the traffic
    rule does not apply (found in `make accuracy`: pipe_write_full, rank 0 in anon_pipe_write
    with 16-36 writev a rank in strace's 2 s, was called progressing). What made it lie: a rank
    writing to a slow consumer (slow_metrics_consumer: ~80 KB/s, under the bar of measured
    I/O work) caught in the write in every sample; its main thread's wchar advances, the pipe
    drains: not stuck."""
    digest = s.digest
    if s.status != "blocked" or not digest.stationary or len(digest.stack_ids) < 2:
        return False  # "blocked" with two samples or more: no measured work (see _status)
    wchan = digest.proc.wchan or ""
    if not ((digest.proc.state or "")[:1] == "D" or any(n in wchan for n in _OFF_NETWORK_WCHAN)):
        return False
    counted = [s.main_io for s in digest.proc.samples if s.main_io is not None]
    return len(counted) < 2 or counted[-1][:2] == counted[-2][:2]


def _moved_on(digest: RankDigest) -> str:
    """", data on N of its M connections meanwhile" when the connections were looked up."""
    recent = _windowed(digest.proc)
    if recent is None or not recent.checked:
        return ""
    return f", data on {len(recent.active)} of its {recent.checked} connections meanwhile"


def _looping_in_one_place(statuses: list[_Status]) -> bool:
    """Every rank whose stack changed between samples busy in one function of the job's code,
    none of them in or out of a collective, while another rank waits: lines moving inside one
    call are no step completed (majority_spinning: ranks 1-3 redraw in `while not kept:` in
    deduplicated_ids for ever, rank 0 waits in the all_reduce; it was "progressing, not hung:
    3 of 4 ranks changed stack"). Such ranks then go where one look's ranks at one line go (a
    shared phase, a gated one, a spin): what `--samples 1` says of the same job. What would
    make it lie: a healthy phase of Python work in one function longer than the look, which
    the waiting rank skipped (healthy_shared_python_phase): said as a slow step or a hang,
    info, like a look of one sample; ranks moving in several functions stay progress."""
    moving = [s for s in statuses if not s.digest.settled]
    if not moving or not any(s.status == "waiting" for s in statuses):
        return False
    sites = {_phase_site(s) for s in moving}
    site = next(iter(sites))
    return (all(s.status == "busy" for s in moving) and len(sites) == 1
            and site is not None and is_user_file(site.rpartition(":")[0]))


def _progressing_by_traffic(
    statuses: list[_Status], talking: list[tuple[_Status, int]], traced: int
) -> Verdict:
    ranks = [s.rank for s, _ in talking]
    evidence = [
        f"rank {s.rank}: {n} send/receive calls in "
        f"{s.digest.proc.strace.window_s if s.digest.proc.strace else 0:.1f} s of strace"
        + _moved_on(s.digest)
        for s, n in talking[:4]
    ]
    evidence.append(
        "every sample caught the ranks in the same phase: "
        + "; ".join(_group_evidence(statuses, limit=3))
    )
    return Verdict(
        kind=VerdictKind.PROGRESSING,
        severity="info",
        summary=f"the job is progressing, not hung: {len(ranks)} of {traced} traced ranks "
        f"({format_int_ranges(ranks)}) moved data over the network while strace watched",
        evidence=tuple(evidence),
        next_step=NEXT_STEPS["progressing"],
    )


def _progressing_in_the_look(statuses: list[_Status], moved: list[_Status], looked: int) -> Verdict:
    ranks = [s.rank for s in moved]
    evidence = []
    for s in moved[:4]:
        recent = s.digest.proc.recent_traffic
        if recent is not None and recent.active:
            c = recent.active[0]
            evidence.append(f"rank {s.rank}: data on {c.local} -> {c.remote} "
                            f"{min(c.last_sent_ms, c.last_received_ms)} ms before the look ended"
                            f" ({len(recent.active)} of its {recent.checked} connections in "
                            f"its last {recent.within_ms / 1000:.1f} s)")
    evidence.append("the stacks caught the ranks at: " + "; ".join(_group_evidence(statuses, limit=3)))
    return Verdict(
        kind=VerdictKind.PROGRESSING,
        severity="info",
        summary=f"the job is progressing, not hung: {len(ranks)} of {looked} ranks "
        f"({format_int_ranges(ranks)}) moved data to other ranks in the look's last "
        f"{LOOK_MOVED_MS / 1000:.1f} s (tcp_info)",
        evidence=tuple(evidence),
        next_step=NEXT_STEPS["progressing"],
    )


def _hang_verdicts(
    snapshot: Snapshot, merge: StackMerge, statuses: list[_Status], layout: _Layout
) -> tuple[list[Verdict], bool]:
    """The stack-based verdicts, and whether they describe a hang."""
    if not snapshot.nodes:
        return [
            Verdict(
                kind=VerdictKind.INCOMPLETE,
                severity="warning",
                summary="the snapshot holds no node results: nothing to analyse",
                next_step=NEXT_STEPS["incomplete"],
            )
        ], False
    if not statuses:
        if merge.unidentified:
            n = len(merge.unidentified)
            return [
                Verdict(
                    kind=VerdictKind.INCOMPLETE,
                    severity="warning",
                    summary=f"{n} job process{'es' if n != 1 else ''} found, none with a rank "
                    "identity (RANK / SLURM_PROCID): cannot compare ranks",
                    evidence=tuple(
                        f"{node.name} pid {p.pid}" for node, p in merge.unidentified[:8]
                    ),
                    next_step=NEXT_STEPS["no_ranks"],
                )
            ], False
        waiting_launchers = _launchers_in_rendezvous(snapshot)
        if waiting_launchers:
            return [_launchers_waiting(snapshot, waiting_launchers)], False
        return [
            Verdict(
                kind=VerdictKind.NO_RANKS,
                severity="warning",
                summary="no rank process of the job was found on any node that answered",
                evidence=tuple(f"{n.name}: {n.status}" for n in snapshot.nodes[:8]),
                next_step=NEXT_STEPS["no_ranks"],
            )
        ], False

    statuses = _between_attempts(statuses)
    statuses = [_fed_by_a_dead_thread(s, snapshot.log_findings) for s in statuses]
    held = _lock_waits(statuses)  # before peer waits turn its waiters into "waiting"
    if not held:
        statuses = _waits_for_lock_holders(statuses)
    statuses, peer_note = _peer_waits(statuses)
    if peer_note is None:
        statuses, peer_note = _poll_waits(statuses)
    statuses, program_notes = _across_programs(statuses)
    groups = _group_view(statuses, layout.world_size)
    statuses, group_notes = _with_groups(statuses, groups, layout.world_size)
    by_status: dict[str, list[_Status]] = {}
    for s in statuses:
        by_status.setdefault(s.status, []).append(s)
    waiting = by_status.get("waiting", [])
    blocked = by_status.get("blocked", [])
    busy = by_status.get("busy", [])
    movers = by_status.get("moving", [])
    dead = by_status.get("dead", [])
    unsampled = by_status.get("unsampled", [])

    multi = [s for s in statuses if len(s.digest.stack_ids) > 1]
    n_moving = sum(1 for s in multi if not s.digest.settled)
    if movers or (multi and n_moving > len(multi) - n_moving
                  and not _looping_in_one_place(statuses)):
        return [_progressing(merge, statuses, movers, layout)], False
    # A peer wait's own calls (a store polled with a timeout: a request and a reply each time)
    # are the wait, not collectives completing (found with store_poll: 70 calls in 2 s a rank
    # called progressing). Ranks whose store wait paces healthy steps (store_paced_steps): the
    # rank that sets the key moves data and counts. What made it lie (store_poll_host): the
    # store's host is the culprit and serves the pollers with recv/send calls (torch's first
    # store server; the libuv one reads and writes): its serving counted as collectives.
    # strace -c cannot tell the two apart; the connections can: which ones carried data in
    # the window (_collective_traffic).
    traced = [(s, _traffic(s.digest)) for s in statuses if s.kind != "peer"]
    traced_known = [(s, n) for s, n in traced if n is not None]
    procs = [s.digest.proc for s in statuses]
    store, ends = _store_ports(procs), _rank_endpoints(procs)
    gpus = any(n.gpus is not None and n.gpus.gpus for n in snapshot.nodes)
    # a rank whose data between ranks was not its collective's (heartbeat_group_hang); on GPU
    # nodes the default group is most likely NCCL's, and the gloo ones side groups
    by_rank = {s.rank: s for s in statuses}
    elsewhere = set() if gpus else {
        s.rank for s in statuses
        if (_default_group_slept(s, groups) or _p2p_stranded(s, by_rank))
        and _data_between_ranks(s, store, ends)}
    talking = [(s, n) for s, n, moved in ((s, n, _collective_traffic(s.digest, store, ends))
                                          for s, n in traced_known)
               if n >= (1 if moved else TRAFFIC_CALLS) and not _forming(s)
               and s.rank not in elsewhere and moved is not False]
    if (talking and 2 * len(talking) > len(traced_known) and not dead and not layout.missing
            and not any(_stuck_off_network(s) for s in statuses)):
        # The stacks look the same in every sample (the samples all landed in the same phase),
        # but strace saw most ranks move data: collectives complete, the job progresses.
        return [_progressing_by_traffic(statuses, talking, len(traced_known))], False
    moved, looked = _talking_in_the_look(statuses, store, ends) if not traced_known else ([], 0)
    moved = [s for s in moved if s.rank not in elsewhere]
    if (moved and 2 * len(moved) > looked and not dead and not layout.missing
            and not any(_stuck_off_network(s) for s in statuses)):
        # a look without strace: most ranks moved data to other ranks in its last 0.25 s
        return [_progressing_in_the_look(statuses, moved, looked)], False

    single = merge.max_samples < 2
    severity = "warning" if single else "critical"
    caveats: list[str] = []
    if single:
        caveats.append("one sample per rank: a hang cannot be told from a slow step")
    if layout.unknown:
        caveats.append(
            f"confidence lowered: {_ranks_label(layout.unknown)} unknown "
            f"(nodes {', '.join(layout.failed_nodes)} did not report)"
        )
    if unsampled:
        caveats.append(
            f"confidence lowered: no stack for {_ranks_label(s.rank for s in unsampled)}"
        )
    by_rule = _group_by(
        (s for s in statuses if s.digest.stack_ids and s.digest.main_rule != "os_thread_id"),
        lambda s: s.digest.main_rule,
    )
    for rule, group in by_rule.items():
        caveats.append(
            f"main thread of {_ranks_label(s.rank for s in group)} chosen by rule '{rule}' "
            "(no thread's OS id equals the pid in py-spy's output)"
        )

    if held:  # after the progress checks: a look in which collectives complete is no deadlock
        return [_lock_deadlock(statuses, held, single)], True
    ended = all(s.ended for s in statuses)
    if ended and any(_works_at_exit(s) for s in statuses):
        return [_finishing(statuses, layout.missing)], False
    # Ranks working or blocked outside every waiting rank's group are not what anyone waits
    # for (healthy_eval_rank: trainers on a group of their own, an evaluator waiting for rank 0)
    awaited = (_awaited(statuses, groups) if waiting and (blocked or busy) else None) or set()
    free = [s for s in blocked + busy if awaited and s.rank not in awaited]
    if free:
        blocked = [s for s in blocked if s.rank in awaited]
        busy = [s for s in busy if s.rank in awaited]
    finished = _finished_early(snapshot, layout, waiting, blocked, busy, dead)
    if finished:
        layout = replace(layout, missing=())
    verdicts: list[Verdict] = []
    # Every rank left is past its program's end: the ranks that have no process most likely
    # ended the same way (they finished; a crash leaves a traceback or an exit code in the
    # log, which the missing-rank verdict would show). Blamed, they would hide the rank that
    # cannot exit (exit_waits_uploader).
    if dead or (layout.missing and not ended):
        verdicts.append(_not_started_there(
            snapshot, _missing(dead, layout.missing, waiting, blocked + busy, layout.asked)))
    # waiting ranks that moved nothing over TCP for longer than a phase may last: no "cannot
    # tell" for them (their ranks-busy verdicts say what they would say of a hang)
    # a rank whose connections carry another group's data has its quiet time cut by it
    waited = None if elsewhere & {s.rank for s in waiting} else _quiet_s(waiting)
    timeout = LONG_WAIT_S["nccl" if gpus else "gloo"]
    long_wait = waited is not None and waited >= timeout
    compiling = [s for s in blocked + busy if _compiling(s)]
    if compiling and len(compiling) == len(blocked) + len(busy) and waiting and not dead \
            and not layout.missing and not ended and not long_wait:
        verdicts.append(_compile_step(compiling, waiting))
        blocked, busy = [], []
    serving = [(s, loop) for s in blocked if (loop := _serving(s))]
    if serving and len(serving) == len(blocked) and not busy and not dead \
            and not layout.missing and not ended \
            and _commanded_by(waiting, [s for s, _ in serving]):
        # no long_wait here: a service idle overnight raised its process group's timeout
        verdicts.append(_serving_step(serving, waiting))
        blocked = []
    if blocked and (waiting or dead or layout.missing or ended):
        verdicts.append(_with_dead_threads(
            _with_called_target(_straggler(blocked, waiting, severity), blocked, waiting),
            blocked,
            snapshot.log_findings))
        if ended and layout.missing:
            gone = (f"{_ranks_label(layout.missing)} {_verb(layout.missing, 'has', 'have')} "
                    "no process: ended, most likely as the ranks above did (every rank left is "
                    "past its program's end)")
            verdicts[-1] = _with_evidence(verdicts[-1], [gone])
            if _crashed_in_log(snapshot, layout.missing):  # ... unless the log says otherwise
                verdicts.append(_missing(dead, layout.missing, waiting, blocked + busy, layout.asked))
    # ranks waiting for DataLoader workers that compute are never the spinners themselves
    inputs = [s for s in busy if s.kind == "input"]
    movers = [s for s in busy if s.kind in ("transfer", "storage", "child_transfer")]
    computing = [s for s in busy
                 if s.kind not in ("input", "transfer", "storage", "child_transfer")]
    if inputs and waiting and not computing and not verdicts:
        verdicts.append(_slow_input(inputs, waiting))
    if movers and waiting and not computing and not verdicts:
        verdicts.append(_slow_transfer(movers, waiting))
    if computing and (waiting or dead or layout.missing):
        native = [s for s in computing if _native_step(s)]
        # one slow rank waited for by the rest, on CPU: with NCCL a hung collective surfaces
        # as ranks busy without the GIL at the next sync (.item()), and that stays "spinning"
        # when they are the most (bigscience's 6 to 2); as many computing as waiting is two
        # pipeline stages computing while the others wait for them (healthy_pipeline_p2p),
        # said as a rank-gated phase where it is one
        slow = len(native) == len(computing) and not verdicts and not gpus and not long_wait
        gated = (not verdicts and not dead and not layout.missing and not long_wait
                 and _gated_phase(computing, waiting))
        shared = (not verdicts and not gpus and not dead and not layout.missing
                  and not long_wait and _shared_phase(computing, waiting))
        if slow and len(computing) < len(waiting):
            verdicts.append(_slow_step(computing, waiting))
        elif gated:
            verdicts.append(_gated_step(computing, waiting))
        elif shared:
            verdicts.append(_shared_step(computing, waiting))
        elif slow and len(computing) == len(waiting):
            verdicts.append(_slow_step(computing, waiting))
        else:
            verdicts.append(_spinning(computing, waiting, severity))
    if not verdicts and unsampled and waiting and len({s.position for s in waiting}) == 1:
        verdicts.append(_unsampled_straggler(unsampled, waiting))
    if not verdicts:
        verdicts.extend(_without_waiters(waiting, blocked, busy, severity))
        if finished and verdicts:
            verdicts[0] = _with_evidence(verdicts[0], [finished])
    if not verdicts and unsampled:
        verdicts.append(_unread(unsampled))
    if verdicts and verdicts[0].kind in (VerdictKind.STRAGGLER, VerdictKind.SPINNING, VerdictKind.MISSING_RANK):
        calls = {_collective_call(s) for s in waiting}
        if len(calls) > 1:
            verdicts[0] = _with_evidence(
                verdicts[0],
                [
                    (
                        f"the waiting ranks sit in {len(calls)} different collectives: a "
                        "consequence of the culprit, or a mismatch of their own"
                    )
                ],
            )
    if (waited is not None and waited >= QUIET_SAID_S and verdicts
            and verdicts[0].kind in (*HANG_KINDS, VerdictKind.SLOW_STEP)):
        verdicts[0] = _with_evidence(verdicts[0], [
            _quiet_line(waiting, waited, timeout if long_wait else None, "NCCL" if gpus else "gloo")])
    if free and verdicts:
        ranks = [s.rank for s in free]
        if verdicts[0].kind == VerdictKind.ALL_WAITING:  # every rank of the groups, not the job
            verdicts[0] = replace(verdicts[0], summary=verdicts[0].summary.replace(
                "every known rank (", "every rank of the groups waited on (", 1))
        verdicts[0] = _with_evidence(verdicts[0], [(
            f"{_ranks_label(ranks)} {_verb(ranks, 'works', 'work')} outside the groups the "
            f"waiting ranks wait on ({_ranks_label(sorted(awaited))} between them, read "
            "from the ranks' locals): not what they wait for")])
    links = _stalled_links(statuses)
    if links and verdicts:
        if verdicts[0].kind == VerdictKind.ALL_WAITING:
            verdicts[0] = _stalled_network(verdicts[0], statuses, links)
        else:  # the network may be a consequence here (a node gone) or a second problem
            phrase, lines = _link_phrase(links)
            verdicts[0] = _with_evidence(verdicts[0], [f"also: {phrase}", *lines])
    if group_notes:
        verdicts = [
            _with_evidence(v, group_notes) if v.kind == "mismatched_collective" else v
            for v in verdicts
        ]
    if peer_note:
        verdicts = [
            _with_evidence(v, [peer_note]) if v.kind in HANG_KINDS else v for v in verdicts
        ]
    if program_notes:
        verdicts = [
            _with_evidence(v, program_notes) if v.kind in HANG_KINDS else v for v in verdicts
        ]
    notes = []
    collective = sorted(r for r in elsewhere if by_rank[r].op not in _PEERED)
    if collective:
        notes.append(
            f"{_ranks_label(collective)} {_verb(collective, 'waits', 'wait')} on the default "
            "group, whose gloo workers did not run during the look: the data "
            f"{_verb(collective, 'its', 'their')} connections moved was not the collective's "
            "(another group's or another channel's between the ranks: a health check, a "
            "liveness ring, metrics; or an earlier collective's last bytes)")
    p2p = sorted(elsewhere - set(collective))
    if p2p:
        notes.append(
            f"{_ranks_label(p2p)} {_verb(p2p, 'waits', 'wait')} in a send or receive whose "
            "thread did not run during the look, nor did the peer's, which is not in the "
            f"matching call: the data {_verb(p2p, 'its', 'their')} connections moved was not "
            "the transfer's (another group's or another channel's between the ranks)")
    if notes:
        verdicts = [_with_evidence(v, notes) if v.kind in HANG_KINDS else v for v in verdicts]
    if caveats:
        verdicts = [_with_evidence(v, caveats) for v in verdicts]
    verdicts = [_with_confidence(v, statuses) for v in verdicts]
    return verdicts, any(v.severity != "info" for v in verdicts)


GROUPS_READ = "process groups read from the ranks' locals (py-spy --locals, new_group results)"
GROUPS_INFERRED = "group membership inferred from where the ranks wait"
_P2P_OPS = frozenset({"send", "recv", "isend", "irecv", "send_object_list", "recv_object_list",
                      "batch_isend_irecv", PIPELINE_P2P})
_SOCKET_WCHAN = ("poll", "select", "epoll", "sk_wait", "tcp_", "unix_stream", "wait_woken", "inet_")
PEER_WAIT_OP = "a store/socket/Work wait on a peer"


def _is_peer_wait(s: _Status) -> bool:
    """Idle in a C call from the job's own code, the kernel waiting on a socket: the shape of a
    TCPStore ``wait``/``get`` (or any blocking receive from a peer) seen without --native."""
    if s.status != "blocked" or s.info is None or s.info.kind != "user":
        return False
    if s.kind not in ("io", "lock") or _measured_work(s.digest):
        return False
    wchan = s.digest.proc.wchan or ""
    return any(needle in wchan for needle in _SOCKET_WCHAN) or "futex" in wchan


def _caught_awake(s: _Status) -> bool:
    """Blocked at a call from the job's own code (so under the CPU bar over the window, see
    _is_busy), yet runnable with no wait channel when read: a waiter whose poll timeout (or a
    tool's ptrace stop) had just woken it. It joins a peer-wait group at its very stack (found
    in `make accuracy`: store_wait --samples 1, rank 1 in state R at the store.wait of ranks 0
    and 3 was blamed with the real culprit). So does one read asleep with no wait channel, its
    state and its wait read either side of a wake (store_poll --samples 1: rank 1 at the store
    poll of ranks 0 and 3, blamed with rank 2). What would make it lie: a rank computing at that
    call that got under 2 % of a core over the window, the bar every one-sample rule shares."""
    proc = s.digest.proc
    return (
        s.status == "blocked" and s.info is not None and s.info.kind == "user"
        and s.kind in ("io", "lock") and not _measured_work(s.digest) and not proc.wchan
        and (proc.state or "")[:1] in ("R", "S")
    )


def _lock_waits(statuses: list[_Status], holders_in: tuple[str, ...] = ("waiting", "blocked"),
                ) -> dict[int, tuple[_Status, FileLock]]:
    """{rank: (the rank holding the file lock it waits for, that lock)} of the ranks blocked
    on a file lock another rank holds while that rank is stuck itself (in a collective, or
    blocked; ``holders_in``): a deadlock across ranks (cache_lock_barrier: a FileLock held
    across a barrier).
    The holder is the pid the waiter's node names (/proc/locks), else the one rank whose
    node reports that inode held (a shared filesystem's lock held on another node; the path
    must agree when both are known). A holder that works (a rank writing a shared log under
    the lock, caught by the look) is not stuck: the usual rules decide."""
    at = {(s.digest.node, s.digest.proc.pid): s for s in statuses}
    holding: dict[int, list[tuple[_Status, FileLock]]] = {}
    for s in statuses:
        for lock in s.digest.proc.file_locks:
            if lock.held:
                holding.setdefault(lock.inode, []).append((s, lock))
    found: dict[int, tuple[_Status, FileLock]] = {}
    for s in statuses:
        if s.status != "blocked":
            continue
        for lock in s.digest.proc.file_locks:
            if lock.held:
                continue
            holder = at.get((s.digest.node, lock.holder_pid)) if lock.holder_pid else None
            if holder is None:
                # a holder the node's table names is that pid (on the node, or a rank elsewhere
                # of that pid holding that inode: nodes that share a kernel); none named: the
                # one rank that holds the inode with the same path
                others = [h for h, mine in holding.get(lock.inode, ())
                          if h is not s and (h.digest.proc.pid == lock.holder_pid
                                             if lock.holder_pid else
                                             None in (mine.path, lock.path)
                                             or mine.path == lock.path)]
                holder = others[0] if len({h.rank for h in others}) == 1 else None
            if holder is not None and holder is not s and holder.status in holders_in:
                found[s.rank] = (holder, lock)
                break
    return found


LOCK_WAIT_OP = "a file lock"


def _waits_for_lock_holders(statuses: list[_Status]) -> list[_Status]:
    """Ranks blocked on a file lock that a working rank holds wait for that rank, as others
    wait in a barrier for a rank-gated phase (healthy_cache_lock_build: the first rank builds
    the shared cache under its lock for minutes, the others block in flock() until it is
    done): *waiting* in LOCK_WAIT_OP, ``waits_for`` the holder. Blocked, they were taken for
    stragglers and the holder for a spinner. What would make it lie: a holder in an endless
    loop under its lock, which a short look cannot tell from a long build (said so)."""
    waits = _lock_waits(statuses, ("busy",))
    if not waits:
        return statuses
    out = []
    for s in statuses:
        if s.rank not in waits:
            out.append(s)
            continue
        holder, lock = waits[s.rank]
        out.append(replace(
            s, status="waiting", kind="peer", op=LOCK_WAIT_OP, waits_for=holder.rank,
            position=("lock", lock.inode, s.site),
            via=f"on {lock.path or 'inode ' + str(lock.inode)}, held by rank {holder.rank}"))
    return out


def _lock_deadlock(statuses: list[_Status], held: dict[int, tuple[_Status, FileLock]],
                   single: bool) -> Verdict:
    """The ranks holding file locks that other ranks wait for, while stuck themselves."""
    holders = {h.rank: h for h, _ in held.values()}
    waiters = [s for s in statuses if s.rank in held]
    parts = []
    for rank, holder in sorted(holders.items()):
        mine = [s for s in waiters if held[s.rank][0].rank == rank]
        lock = held[mine[0].rank][1]
        name = lock.path or f"inode {lock.inode}"
        sites = ", ".join(_unique(s.site for s in mine if s.site))
        parts.append(
            f"rank {rank} holds the file lock on {name} ({lock.kind} {lock.mode}) that "
            f"{_ranks_label(s.rank for s in mine)} {_verb([s.rank for s in mine], 'waits', 'wait')} for"
            f"{' at ' + sites if sites else ''}, while it {'waits in' if holder.status == 'waiting' else 'is'} "
            f"{_where(holder)}")
    summary = "; ".join(parts) + ": a deadlock across ranks"
    evidence = [_proc_evidence(h) for h in holders.values()][:4]
    for s in waiters[:8]:
        holder, lock = held[s.rank]
        evidence.append(
            f"rank {s.rank}: waits for a {lock.kind} {lock.mode} lock on "
            f"{lock.path or 'inode ' + str(lock.inode)} held by rank {holder.rank}"
            + (f" (pid {lock.holder_pid} in its node's /proc/locks)" if lock.holder_pid else
               " (held on its node, joined by inode)")
            + (f", wchan {s.digest.proc.wchan}" if s.digest.proc.wchan else ""))
    others = [s for s in statuses if s.rank not in held and s.rank not in holders]
    if others:
        evidence.extend(_group_evidence(others, limit=4))
    return Verdict(
        kind=VerdictKind.STRAGGLER,
        severity="warning" if single else "critical",
        summary=summary,
        culprit_ranks=tuple(sorted(holders)),
        sites=_unique([*(h.site for h in holders.values() if h.site),
                       *(s.site for s in waiters if s.site)]),
        evidence=tuple(evidence),
        next_step=(
            "release the file lock before any collective: a rank that waits in a barrier (or "
            "any collective) inside `with FileLock(...)` waits for ranks that wait for its lock; "
            "let one rank build under the lock and put the barrier after it"
        ),
    )


def _peer_waits(statuses: list[_Status]) -> tuple[list[_Status], str | None]:
    """Ranks blocked together at one socket wait while other ranks are elsewhere wait on those
    others, as in a collective: they become *waiting* (position: their stack)."""
    groups = _group_by(
        (s for s in statuses if _is_peer_wait(s)),
        lambda s: s.info.keys if s.info is not None else None,
    )
    for s in statuses:
        if _caught_awake(s) and s.info is not None and s.info.keys in groups:
            groups[s.info.keys].append(s)
    # Two ranks stuck in the same C call on a socket while most ranks wait in a collective are
    # stragglers (a remote service without timeout), not the waiters: a peer-wait group must
    # be at least as large as the group of ranks in collectives.
    in_collectives = sum(1 for s in statuses if s.status == "waiting")
    together = [
        g
        for g in groups.values()
        if len(g) >= 2 and len(g) < len(statuses) and len(g) >= in_collectives
    ]
    if not together:
        return statuses, None
    chosen = {id(s) for g in together for s in g}
    out = [
        replace(s, status="waiting", kind="peer", op=PEER_WAIT_OP, position=("peer", s.site))
        if id(s) in chosen
        else s
        for s in statuses
    ]
    g = together[0]
    note = (
        f"{_ranks_label(s.rank for s in g)} sit idle together at {g[0].site}, in a call from "
        f"their own code, the kernel waiting (wchan {g[0].digest.proc.wchan}), no CPU: taken "
        "as a wait on a peer (TCPStore wait/get, a socket receive, an async Work.wait), "
        "like a collective; --native shows the C++ call"
    )
    return out, note


POLL_WAIT_OP = "a sleep-poll loop"


def _poll_waits(statuses: list[_Status]) -> tuple[list[_Status], str | None]:
    """Most ranks asleep together at one line of their own code, no rank in a collective, and
    the rest blocked or busy elsewhere: the sleepers poll for what the others would do (an
    asynchronous collective's ``work.is_completed()``, a store key with ``check``, a file a
    peer writes) and wait on them, like a collective (async_poll_wait: a rank's prefetch died,
    the others poll their all_reduce; the four were blamed). What would make it lie: many
    ranks stuck in one retry loop of their own while a few others are stuck apart, each for
    its own reason (they would need a collective to wait on one another). A rank sleeping
    alone is a poller blamed as before (store_wait: the index rank polls for a file while the
    others wait on its key); so is every rank asleep (idle)."""
    if any(s.status == "waiting" for s in statuses):
        return statuses, None
    # by the function they sleep in: a poller caught once at its loop's test line is "poll",
    # its line moving (healthy_poll_prepare, one rank of three with the defaults)
    groups = _group_by((s for s in statuses if s.status == "blocked" and _sleep_function(s)
                        and (s.kind == "poll" or (s.kind == "sleep" and s.digest.stationary))),
                       _sleep_function)
    if not groups:
        return statuses, None
    group = max(groups.values(), key=len)
    where = _sleep_function(group[0])
    rest = [s for s in statuses if s not in group]
    # the rest elsewhere: a rank of the same loop caught otherwise (runnable, just woken:
    # healthy_slow, every rank asleep in its read loop, rank 0 in state R) is no other place
    if len(group) < 2 or len(group) <= len(rest) or not any(
            s.status in ("blocked", "busy") for s in rest) or any(
            _sleep_function(s) == where for s in rest):
        return statuses, None
    ranks = [s.digest.proc for s in statuses]
    store, owner = _store_ports(ranks), _endpoint_owners(statuses)
    stuck = [s for s in rest if s.status in ("blocked", "busy")]
    if not any(_polls_a_collective(s) for s in group) and all(
            s.status == "blocked" and _waits_on_the_job(s, store, owner) for s in stuck):
        # the rest wait on the job itself (a store key, a peer's reply) and the sleepers hold
        # no collective to poll: the sleepers are what the rest wait for
        # (retry_loop_store_waiter: ranks 0-2 retry a dead service for ever before they
        # publish their leases, rank 3 waits for the leases in store.wait); sleepers polling
        # an async collective wait on the rest whatever these wait for (store_typo_async_poll)
        waiters = {id(s) for s in stuck}
        out = [replace(s, status="waiting", kind="peer", op=PEER_WAIT_OP,
                       position=("peer", s.site)) if id(s) in waiters else s for s in statuses]
        note = (f"{_ranks_label(s.rank for s in stuck)} "
                f"{_verb([s.rank for s in stuck], 'waits', 'wait')} on the job over a socket "
                f"({_job_socket_phrase(stuck, store, owner)}) while "
                f"{_ranks_label(s.rank for s in group)} sleep together in {where}, a loop of "
                "their own code: taken as waiting on the sleepers")
        return out, note
    chosen = {id(s) for s in group}
    out = [replace(s, status="waiting", kind="peer", op=POLL_WAIT_OP, position=("poll", s.site))
           if id(s) in chosen else s for s in statuses]
    note = (f"{_ranks_label(s.rank for s in group)} sleep together in {where}, a loop of "
            f"their own code, while {_ranks_label(s.rank for s in rest)} "
            f"{_verb([s.rank for s in rest], 'is', 'are')} elsewhere: taken as polling for "
            "what those do (an asynchronous collective's completion, a key, a file), like a "
            "collective")
    return out, note


_POLL_CALLS = frozenset({"poll", "ppoll"})


def _endpoint_owners(statuses: list[_Status]) -> dict[str, _Status]:
    """{socket endpoint (_endpoint_key): the rank whose connection has it as its local end}."""
    owner: dict[str, _Status] = {}
    for s in statuses:
        for c in s.digest.proc.connections:
            if c.state == "ESTABLISHED":
                owner.setdefault(_endpoint_key(s, c.local), s)
    return owner


def _endpoint_key(s: _Status, endpoint: str) -> str:
    """``endpoint`` as seen from rank ``s``: a loopback one keyed by its host too (each host
    has its own 127.0.0.1; the nodes of an emulated cluster share one host, and one name)."""
    address = endpoint.rpartition(":")[0].strip("[]")
    loopback = address.startswith("127.") or address == "::1"
    return f"{s.digest.host}/{endpoint}" if loopback else endpoint


def _job_sockets(s: _Status, store: frozenset[str],
                 owner: dict[str, _Status]) -> list[BlockedCall]:
    """The rank's main thread's socket waits (a receive, a poll: a TCPStore client polls for its
    reply) whose far end is the job's store or another rank."""
    proc = s.digest.proc
    return [c for c in proc.blocked_calls
            if c.tid == proc.pid and (c.call in TRANSFER_CALLS or c.call in _POLL_CALLS)
            and c.remote and not c.remote.endswith(":0")
            and (_port(c.remote) in store
                 or owner.get(_endpoint_key(s, c.remote), s) is not s)]


def _waits_on_the_job(s: _Status, store: frozenset[str], owner: dict[str, _Status]) -> bool:
    """Blocked, idle, its main thread in a socket wait on the job's store or on another rank: it
    waits for the job (a key ranks will set, a peer's reply), not for something of its own or
    an outside service (an HTTP call with no timeout: a straggler). What would make it lie: a
    rank waiting for a key nobody will ever set (a typo in its own key) while the sleepers
    poll a collective it never joins: told apart by the collective's handle in the sleepers'
    locals (_polls_a_collective), when they were read."""
    return not _measured_work(s.digest) and bool(_job_sockets(s, store, owner))


WORK_HANDLE = "c10d.Work at 0x"


def _polls_a_collective(s: _Status) -> bool:
    """The frame the rank sleeps in (its main thread's innermost of the job's own) holds a
    collective's handle in its locals (a torch ``Work``, read with --locals in the first
    round): its sleep loop polls an asynchronous collective (``while not
    work.is_completed(): sleep``). A handle in an outer frame (a finished step's, kept in
    ``main``: retry_loop_stale_handle) says nothing of the loop."""
    sample, frames = _locals_sample(s.digest.proc)
    if sample is None:
        return False
    own = next((i for i, f in enumerate(frames) if is_user_file(f.file)), None)
    return any(WORK_HANDLE in text and index == own for index, _, text in sample.groups)


def _job_socket_phrase(stuck: list[_Status], store: frozenset[str],
                       owner: dict[str, _Status]) -> str:
    parts = []
    for s in stuck[:4]:
        c = _job_sockets(s, store, owner)[0]
        peer = owner.get(_endpoint_key(s, c.remote or ""))
        far = (f"the job's store at {c.remote}" if _port(c.remote or "") in store or peer is None
               else f"rank {peer.rank} at {c.remote}")
        parts.append(f"rank {s.rank} in {c.call} on {c.local} -> {far}")
    return "; ".join(parts)


def _sleep_function(s: _Status) -> str | None:
    """file:function of the rank's innermost frame of its own (where a poll loop sleeps)."""
    top = s.info.top_user_frame if s.info is not None else None
    return function_site(top) if top is not None else None


def _locals_sample(proc: Rank) -> tuple[Sample | None, tuple[Frame, ...]]:
    """The rank's sample read with --locals (the first round's) and its main thread's frames."""
    for sample in proc.samples:
        if sample.groups:
            thread = main_thread(sample, proc.pid)
            return sample, thread.frames if thread is not None else ()
    return None, ()


#: How long waiting ranks that move nothing over TCP make "a slow phase or a hang, cannot tell"
#: a hang (s): torch's default process-group timeout, which ends a job whose ranks wait longer
#: in a collective (NCCL's on nodes with GPUs, gloo's elsewhere): a rank-gated phase, a compile
#: or a compute step that long is not one a job survives with the defaults.
LONG_WAIT_S = {"nccl": 600.0, "gloo": 1800.0}
#: The least quiet time the evidence says (s): under a look's own length it tells nothing.
QUIET_SAID_S = 1.0


def _quiet_s(waiting: list[_Status]) -> float | None:
    """Seconds since any waiting rank last sent or received data on any of its connections
    (tcp_info when strace stopped, or at the end of a look without strace): at least how long
    they have waited; None when not read for every one of them (no connection, no sockets
    read, an older collector)."""
    quiet = [s.digest.proc.recent_traffic.quiet_ms for s in waiting
             if s.digest.proc.recent_traffic is not None]
    if not waiting or len(quiet) < len(waiting) or any(q is None for q in quiet):
        return None
    return min(q for q in quiet if q is not None) / 1000


def _quiet_line(waiting: list[_Status], seconds: float, timeout: float | None, backend: str) -> str:
    ranks = [s.rank for s in waiting]
    span = f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
    line = (f"{_ranks_label(ranks)} {_verb(ranks, 'has', 'have')} moved no data on any "
            f"connection for {span} (tcp_info): {_verb(ranks, 'it has', 'they have')} waited "
            "at least that long")
    if timeout is not None:
        line += (f"; longer than {timeout / 60:.0f} min, torch's default process-group "
                 f"timeout for {backend}: not a phase a job survives with the defaults, most "
                 "likely a hang")
    return line


def _group_view(statuses: list[_Status], world: int | None) -> GroupView:
    """The process groups read from every rank's locals (groups.py): a membership record is
    complete only with every rank's, those of the ranks that do not wait included."""
    return read_groups(((s.rank, *_locals_sample(s.digest.proc)) for s in statuses), world)


def _awaited(statuses: list[_Status], view: GroupView) -> set[int] | None:
    """The ranks the waiting ranks wait with: the members of each one's collective's group,
    when every waiting rank waits in a collective on a subgroup whose members ``view`` read.
    None when a waiting rank waits in another way (a lock, a store key, a peer), on the world,
    or on a group not read: then any rank may be the one it waits for."""
    waiting = [s for s in statuses if s.status == "waiting"]
    if not waiting or any(s.kind != "collective" for s in waiting):
        return None
    awaited: set[int] = set()
    for s in waiting:
        name = view.collective.get(s.rank)
        if name is None or name == WORLD or name not in view.members:
            return None
        awaited.update(view.members[name])
    return awaited


# Frames of Python's own launch machinery below a program's first frame (`python -m`): not the
# program's, so neither what sets two programs apart nor what they share.
_LAUNCH_FILES = ("runpy.py", "<frozen runpy>")


def _program_frames(position: tuple[object, ...]) -> list[tuple[str, str, int | None]]:
    """A collective position's frames (innermost first) without the op's marker and the
    interpreter's launch frames."""
    return [k for k in position[1:]  # type: ignore[misc]
            if isinstance(k, tuple) and not str(k[0]).endswith(_LAUNCH_FILES)]


def _same_call_other_program(p: tuple[object, ...], q: tuple[object, ...]) -> bool:
    """``p`` and ``q`` wait in one collective, called through the same code, from two different
    programs: the same op, the same frames from the collective out to at least one frame past
    torch's own, and past that point frames of files the other never shows, down to each one's
    first frame (its program: an srun --multi-prog task, a leader with a script of its own)."""
    if p[0] != q[0]:
        return False
    a, b = _program_frames(p), _program_frames(q)
    shared = 0
    while shared < min(len(a), len(b)) and a[shared] == b[shared]:
        shared += 1
    # the collective's own frame (torch's c10d function) and at least one caller of it
    if shared < 2 or shared == len(a) or shared == len(b):
        return False
    return not {k[0] for k in a[shared:]} & {k[0] for k in b[shared:]}


def _across_programs(statuses: list[_Status]) -> tuple[list[_Status], list[str]]:
    """Main threads waiting in collectives that differ only by the program each runs.

    A rank whose program is another file (an srun --multi-prog task, a leader's own script that
    calls the shared training code) has other outer frames than its peers at the very same call
    (multi_prog_mismatch: rank 0 taken for a second side of the disagreement). Such positions
    become the position of the largest group they match, and a note says so. Ranks of one
    program always share its first frame, so nothing changes for them; a thread's first frame
    is threading's, shared by every thread, so nothing changes for threads. What it hides: two
    programs calling one shared helper's collective from their own, different places (the
    leader's extra sync against the workers' step) with tensors that do not pair; with one op
    and one shape they pair and nothing hangs there."""
    waiting = [s for s in statuses if s.status == "waiting" and s.kind == "collective"
               and s.position and not s.on_a_thread and s.via is None]
    count: Counter[tuple[object, ...]] = Counter(s.position for s in waiting if s.position)
    if len(count) < 2 or len({_first_of(p) for p in count}) < 2:
        return statuses, []
    chosen: dict[tuple[object, ...], tuple[object, ...]] = {}
    for position, _n in count.most_common():
        chosen[position] = next(
            (ref for ref in dict.fromkeys(chosen.values())
             if _same_call_other_program(position, ref)), position)
    moved = [s for s in waiting if chosen[s.position] != s.position]  # type: ignore[index]
    if not moved:
        return statuses, []
    programs: dict[str, list[int]] = {}
    for s in moved:
        programs.setdefault(_first_of(s.position or ()), []).append(s.rank)
    notes = [f"{_ranks_label(ranks)} {_verb(ranks, 'runs', 'run')} another program ({program}) "
             f"and {_verb(ranks, 'waits', 'wait')} in the same collective through the same code "
             "as ranks of the job's program: counted with them"
             for program, ranks in sorted(programs.items())]
    keyed = {id(s) for s in moved}
    return [replace(s, position=chosen[s.position]) if id(s) in keyed else s  # type: ignore[index]
            for s in statuses], notes


def _first_of(position: tuple[object, ...]) -> str:
    """The file of a position's first frame (its program's), "?" when it has none."""
    frames = _program_frames(position)
    return frames[-1][0] if frames else "?"



def _with_groups(statuses: list[_Status], view: GroupView, world: int | None
                 ) -> tuple[list[_Status], list[str]]:
    """Ranks waiting in collectives, keyed by their collective's process group too, when every
    one's group was read from its locals (groups.py) and they are not all on one group: ranks
    that wait at the same line on different groups do not wait with each other. Otherwise
    nothing changes, and a note says the groups are inferred."""
    waiting = [s for s in statuses if s.status == "waiting" and s.kind == "collective"]
    if not waiting:
        return statuses, []
    unknown = [s.rank for s in waiting if s.rank not in view.collective]
    if unknown:
        return statuses, [
            (f"{GROUPS_INFERRED}: process groups not read for {_ranks_label(unknown)} (no py-spy "
             "--locals sample, or no new_group result in the job's own locals)")
        ]
    if len(set(view.collective.values())) < 2:
        return statuses, [(f"{GROUPS_READ}: every waiting rank's collective is on "
                           f"{next(iter(view.collective.values()))}")]
    keyed = {id(s): s for s in waiting}
    members = dict(view.members)
    members[WORLD] = tuple(range(world)) if world else ()
    out = [
        replace(s, group=view.collective[s.rank], members=members.get(view.collective[s.rank], ()),
                position=(view.collective[s.rank], *(s.position or ())))
        if id(s) in keyed
        else s
        for s in statuses
    ]
    lines = [
        f"{GROUPS_READ}: {name} = {format_int_ranges(ranks)}"
        for name, ranks in view.members.items()
        if name in set(view.collective.values())
    ]
    return out, lines or [f"{GROUPS_READ}: the collectives' groups differ"]


def _with_confidence(verdict: Verdict, statuses: list[_Status]) -> Verdict:
    """Low confidence when the stacks the verdict rests on hold no frame of the job's code."""
    if verdict.kind not in HANG_KINDS:
        return verdict
    named = set(verdict.culprit_ranks)
    relevant = [s for s in statuses if s.rank in named] if named else statuses
    infos = [s.info for s in relevant if s.info is not None]
    if not infos:
        return verdict
    if any(c.is_user for info in infos for c in info.classified):
        # "medium": a rule that rests on an inference the verdict names (group membership)
        return replace(verdict, confidence=verdict.confidence or "high")
    frame = infos[0].top_frame
    return replace(
        verdict,
        confidence="low",
        evidence=verdict.evidence
        + (
            "unsure: no frame of the job's own code on the stacks this verdict rests on (only "
            f"library/stdlib frames, innermost {frame.function} at {frame.file}:{frame.line})"
            if frame is not None
            else "unsure: no frame of the job's own code on the stacks this verdict rests on",
        ),
    )


def _outliers_of_a_compute_phase(blocked: list[_Status], busy: list[_Status]) -> bool:
    """No rank waits in a collective, and every rank that looks blocked has the very stack of
    ranks seen computing, which are at least as many in its class.

    One compute phase seen with a rank that used no CPU in the window: on a crowded node a
    runnable rank can get no tick for seconds, and strace's stops hold a traced one (found in
    `make accuracy`: silent_compute --samples 1, rank 1 at 0.0 % while 0, 2 and 3 used 12-36 %
    at the same line, was called all_waiting). Its peers are not waiting for it yet, so nothing
    is hung now. What it hides: a rank blocked (a native deadlock) inside the very call its
    peers compute in, and only while they still compute; once they wait for it in the next
    collective, it is a straggler.
    """
    by_class = Counter(s.digest.class_index for s in busy)
    idle = Counter(s.digest.class_index for s in blocked)
    return all(by_class[c] >= n for c, n in idle.items())


def _busy_everywhere(busy: list[_Status], idle: list[_Status] | None = None) -> Verdict:
    """Every rank computes in its own code, none waits in a collective: not a hang. ``idle``:
    ranks at the same stacks that used no CPU in the window (see _outliers_of_a_compute_phase)."""
    measured = [s for s in busy if s.digest.cpu_fraction is not None]
    evidence = [_proc_evidence(s) for s in busy[:4]]
    if idle:
        evidence.append(
            f"{_ranks_label(s.rank for s in idle)} at the same stack used no CPU in the window: "
            "starved on a crowded node or held by strace, counted with the ranks computing there"
        )
    inputs_only = all(s.kind == "input" for s in busy)
    if inputs_only:
        why = "their DataLoader workers compute"
    elif measured:
        low = min(s.digest.cpu_fraction or 0.0 for s in measured)
        why = f"their main threads used CPU between samples (at least {100 * low:.0f} % of a core)"
    else:
        why = "py-spy saw their main threads running"
    evidence.extend(_group_evidence(busy, limit=3))
    return Verdict(
        kind=VerdictKind.PROGRESSING,
        severity="info",
        summary=(
            f"not hung: {_ranks_label(s.rank for s in busy)} "
            + ("wait for their DataLoader workers" if inputs_only else "compute in their own code")
            + f" with no collective or synchronisation on their stacks; {why}"
        ),
        sites=_unique(s.site for s in busy),
        evidence=tuple(evidence),
        next_step=(
            "a long compute phase between collectives: attach again later; if every rank is "
            "still busy at the same line, profile it (py-spy top --pid PID)"
        ),
    )


def _asleep_together(everyone: list[_Status]) -> bool:
    """Ranks at one stack, blocked, that the kernel says sleep, save those it says nothing of.

    A rank read at the instant its sleep ends is runnable with no wait channel (state R, no
    CPU used yet): it gives no word of its own, and the stack it shares with the sleepers is
    theirs (found in CI: healthy_slow's rank 0 woke as the look ended, and the job was called
    all_waiting). A rank of the stack whose kernel says anything else (a lock, a pipe) keeps
    the stack from being a sleep.
    """
    if any(s.status != "blocked" for s in everyone):
        return False
    words = {s.kind for s in everyone} - {"blocked"}
    return words == {"sleep"}


_EXTRA_CALL_NOTE = (
    "a collective called on a second thread takes its place in the process group's sequence "
    "like any other: where only some ranks call it, the ranks' calls no longer pair, and "
    "every main thread can wait at the same line"
)


def _extra_calls_on_threads(waiting: list[_Status]) -> list[_Status] | None:
    """Every main thread waits in one collective, and some ranks, not all, have another
    thread stuck in a collective elsewhere (``_side_collective``: at one place in every sample,
    not run between them): those ranks' statuses moved to that thread, the others' kept, or
    None. Rank 0's side thread in a barrier (publishing an evaluation, an asynchronous
    checkpoint) while ranks 1-3 wait with rank 0's main thread in the gradient all_reduce
    (side_thread_collective). Ranks that all have such a thread at one place say nothing of
    who diverged: None."""
    here = waiting[0].position
    side = {s.rank: s.digest.side_collective for s in waiting
            if s.digest.side_collective is not None
            and s.digest.side_collective[1].position not in (None, here)}
    if not side or (len(side) == len(waiting)
                    and len({info.position for _, info in side.values()}) == 1):
        return None
    out = []
    for s in waiting:
        if s.rank not in side:
            out.append(s)
            continue
        name, info = side[s.rank]
        out.append(_Status(s.digest, "waiting", "collective", info.site, info.op, info.position,
                           info, via=f"thread {name}; its main thread waits in {s.op} at "
                           f"{s.site}", on_a_thread=True))
    return out


def _without_waiters(
    waiting: list[_Status], blocked: list[_Status], busy: list[_Status], severity: str
) -> list[Verdict]:
    """No rank is gone: either everyone waits in collectives, or nobody does."""
    if waiting and not blocked and not busy:
        if all(s.status == "waiting" and s.op in STARTUP_OPS for s in waiting):
            alone = _not_joined(waiting)
            if alone:
                joined = [s for s in waiting if s not in alone]
                return [_unjoined_straggler(alone, joined, severity)]
        roots = _stray_roots(waiting)
        if roots is not None:
            return [_root_mismatch(waiting, *roots, severity)]
        if len({s.position for s in waiting}) == 1:
            extra = _extra_calls_on_threads(waiting)
            if extra is not None:
                return [_mismatched(extra, [_EXTRA_CALL_NOTE], severity)]
            return [_all_waiting(waiting, severity, "")]
        return [_mismatched(waiting, [], severity)]
    everyone = blocked + busy
    if busy and not blocked:
        return [_busy_everywhere(busy)]
    if busy and _outliers_of_a_compute_phase(blocked, busy):
        return [_busy_everywhere(busy, idle=blocked)]
    classes = {s.digest.class_index for s in everyone}
    if len(classes) == 1:
        head = everyone[0]
        if _asleep_together(everyone):
            return [
                Verdict(
                    kind=VerdictKind.IDLE,
                    severity="info",
                    summary=f"every rank is sleeping at {head.site}: no collective is pending, "
                    "so this is not a collective hang",
                    sites=_unique([head.site]),
                    evidence=tuple(_group_evidence(everyone)),
                    next_step=STRAGGLER_STEPS["sleep"],
                )
            ]
        note = (
            ": with NCCL, collectives are asynchronous, so ranks hung in one often show up at "
            "the next synchronisation (.item(), .cpu(), cuda.synchronize())"
            if head.status == "busy"
            else ""
        )
        return [_all_waiting(everyone, "warning", note)]
    out = []
    if blocked:
        out.append(_straggler(blocked, [], "warning"))
    if busy:
        out.append(_spinning(busy, [], "warning"))
    return out


def _with_evidence(verdict: Verdict, lines: Iterable[str]) -> Verdict:
    return replace(verdict, evidence=verdict.evidence + tuple(lines))


# ---------------------------------------------------------------------------------------------
# entry point


def _innermost_user_site(finding: LogFinding) -> str:
    for path, line, _function in reversed(_traceback_frames(finding)):
        if is_user_file(path):
            return f"{path}:{'' if line is None else line}"
    return finding.fields.get("site", "")


def _traceback_frames(finding: LogFinding) -> list[tuple[str, int | None, str]]:
    """A logged traceback's frames, outermost first, as (path, line, function)."""
    out = []
    for entry in finding.fields.get("frames", "").splitlines():
        path, _, rest = entry.partition(":")
        line, _, function = rest.partition(":")
        if path and function:
            out.append((path, int(line) if line.isdigit() else None, function))
    return out


def _catches_there(info: StackInfo | None, path: str, line: int | None, function: str) -> bool:
    """The stack's innermost job frame is in ``function`` of ``path``, at another line than
    ``line`` (the call the traceback went through): in the function that caught it, past it."""
    frame = info.top_user_frame if info is not None else None
    if frame is None or frame.file is None or frame.line == line:
        return False
    same_file = frame.file == path or frame.file.endswith("/" + path.lstrip("/"))
    return same_file and (frame.function or "").rsplit(".", 1)[-1] == function


def _with_caught_error(snapshot: Snapshot, verdict: Verdict, statuses: list[_Status]) -> Verdict:
    """A culprit alive in the function that caught an exception the job's log holds.

    A traceback printed by a rank that lives on was caught (traceback.print_exc, logging's
    exception): its outermost frame is the function that caught it. A culprit whose innermost
    job frame is that function, at another line, took its error path there (error_cleanup_barrier:
    rank 3's ValueError caught in main, whose finally runs a barrier while ranks 0-2 train on):
    the error is the cause, the collective its consequence. The traceback is the culprit's when
    its prefix says so, or, unlabelled, when no other rank sits in that function. A traceback
    whose outermost frame is <module> ended its program (a crash): not this rule's. What it
    cannot tell: an error caught long before, the rank stuck later in the same function for
    another reason (the log has no time): the job's going on after it tells, a traceback
    followed by more lines than two a rank (``lines_after``) is not taken (stale_caught_error:
    every rank's start-up error caught in main, dozens of steps before rank 0 hangs in main's
    barrier). Where the log was not read to its end, or an old error is followed by little
    output, it is said as what the log holds, "most likely" the path."""
    if verdict.kind not in HANG_KINDS or verdict.kind == VerdictKind.MISSING_RANK:
        return verdict
    lines: list[str] = []
    clauses: list[str] = []
    said: set[int] = set()
    went_on = 2 * max(len(statuses), 1)  # lines after it: every rank wrote twice more
    for finding in snapshot.log_findings:
        if finding.kind != "traceback":
            continue
        after = finding.fields.get("lines_after", "")
        if after.isdigit() and int(after) > went_on:
            continue
        frames = _traceback_frames(finding)
        if not frames or frames[0][2] == "<module>":
            continue
        path, line, function = frames[0]
        there = [s for s in statuses if s.status != "dead" and s.via is None
                 and _catches_there(s.info, path, line, function)]
        if finding.rank is not None:
            there = [s for s in there if s.rank == finding.rank]
        if len(there) != 1 or there[0].rank not in verdict.culprit_ranks:
            continue
        rank, raised = there[0].rank, _innermost_user_site(finding)
        if rank in said:
            continue
        said.add(rank)
        clauses.append(f"rank {rank} caught {finding.text} (raised at {raised}) in {function}, "
                       "where it waits now")
        lines.append(f"traceback in {finding.source}:{finding.line_no}: {finding.text}: caught in "
                     f"{function} ({path}:{line}), the function rank {rank} waits in now (at "
                     f"{there[0].site}): its wait is most likely that error's path")
    if not clauses:
        return verdict
    return replace(verdict, summary=f"{verdict.summary}; {'; '.join(clauses)}",
                   evidence=(*lines, *verdict.evidence),
                   next_step=NEXT_STEPS["caught_error"])


def _with_exit_evidence(snapshot: Snapshot, verdict: Verdict) -> Verdict:
    """Where a rank that is gone went away: srun's task exit and its traceback in the job log."""
    ranks = set(verdict.culprit_ranks)
    exits = [f for f in snapshot.log_findings if f.kind == "task_exit" and f.rank in ranks]
    tracebacks = [f for f in snapshot.log_findings if f.kind == "traceback"]
    # A traceback is the dead rank's when its prefix says so; an unprefixed one only when it
    # is the only kind in the log (several ranks' unlabelled tracebacks cannot be told apart).
    own = [f for f in tracebacks if f.rank in ranks]
    if not own:
        unlabelled = [f for f in tracebacks if f.rank is None]
        if len({_innermost_user_site(f) for f in unlabelled}) == 1:
            own = unlabelled[:1]
    sites = tuple(dict.fromkeys(_innermost_user_site(f) for f in own if _innermost_user_site(f)))
    evidence = [f"{f.source}:{f.line_no}: {f.text}" for f in exits[:4]]
    evidence += [f"traceback in {f.source}:{f.line_no}: {f.text}" for f in own[:2]]
    if not evidence:
        return verdict
    return replace(verdict, sites=verdict.sites or sites, evidence=tuple(evidence) + verdict.evidence)


def _settled_tail(snapshot: Snapshot, merge: StackMerge, anywhere: bool
                  ) -> tuple[Snapshot, str] | None:
    """The snapshot from the sample on, when the only motion in it was ranks arriving where
    they then stayed (a collective, or the culprit's own block) during the look: (the snapshot
    cut there, why), or None.

    Attached as a hang forms, the last rank to reach the collective is seen in its step first,
    then in the collective: "went in or out of a collective between samples" would call that
    progress (found in `make accuracy`: pipe_write_full, rank 2 in sgd_update, then in the
    gradient all_reduce twice, called progressing). With ``anywhere`` (a hang whose culprit
    moved) an arrival elsewhere counts too: the culprit may arrive late (the same scenario:
    rank 0 in json.dumps, then blocked in its pipe write twice, reported by its function as a
    rank that moves, not by the line it stays on). Only an arrival counts: a rank seen in a
    collective before it moved, one arriving outside a collective without ``anywhere``, a tail
    shorter than two samples or a sample without a stack leave the snapshot whole; and diagnose keeps the cut only when no rank did measurable
    work in it (a healthy loop whose fast ranks wait at one all_reduce line in every sample
    still computes between them).
    """
    count = merge.max_samples
    if count < 3 or not merge.digests:
        return None
    starts: dict[int, int] = {}
    for digest in merge.digests:
        ids = digest.stack_ids
        if len(ids) != count or digest.sample_errors or len(digest.proc.samples) != count:
            return None  # a sample index would not be the same moment on every rank
        first = count - 1
        while first > 0 and ids[first - 1] == ids[-1]:
            first -= 1
        if first:
            if any(merge.table[sid].position is not None for sid in ids[:first]):
                return None  # it was in a collective before: one completed, the rank moved on
            if merge.table[ids[-1]].position is None and not anywhere:
                return None  # not an arrival in a collective: the rank moved
            starts[digest.rank] = first
    cut = max(starts.values(), default=0)
    if not cut or count - cut < 2:
        return None
    tail = replace(snapshot, nodes=tuple(
        replace(node, ranks=tuple(replace(r, samples=r.samples[cut:]) for r in node.ranks))
        for node in snapshot.nodes
    ))
    arrived = sorted(starts)
    why = (
        f"{_ranks_label(arrived)} reached where {'it stays' if len(arrived) == 1 else 'they stay'} "
        f"during the look (by sample {cut + 1} of {count}), and no rank moved or worked after "
        f"that: the hang is judged on samples {cut + 1}-{count}"
    )
    return tail, why


def diagnose(snapshot: Snapshot) -> Analysis:
    """Analyse a snapshot: stack classes, prefix tree, per-rank digests and ordered verdicts."""
    snapshot = one_world(_without_our_stops(snapshot))  # a monitor's step is no ranks
    with job_code(snapshot):  # a training package installed with pip is the job's own code
        packed = worlds(snapshot)
        if packed:
            return _apart(packed)
        return _diagnose(snapshot)


def _without_our_stops(snapshot: Snapshot) -> Snapshot:
    """The ranks' wait channel ``ptrace_stop`` read while the rank is not in a tracing stop and
    no tracer of another tool holds it: our strace's stop as it attached or left, read a moment
    apart from the state (store_wait: rank 0 in its store wait, read "blocked in I/O" with
    rank 2). Read as no wait channel; a debugger's stop (state t, a tracer) stays."""
    def ours(rank: Rank) -> bool:
        return (rank.wchan == "ptrace_stop" and (rank.state or "")[:1] not in ("t", "T")
                and rank.tracer is None)

    if not any(ours(r) for n in snapshot.nodes for r in n.ranks):
        return snapshot
    return replace(snapshot, nodes=tuple(
        replace(n, ranks=tuple(replace(r, wchan=None) if ours(r) else r for r in n.ranks))
        for n in snapshot.nodes))


def _apart(packed: tuple[tuple[str, Snapshot], ...]) -> Analysis:
    """Trainings of one job that are worlds of their own (steps packed in one allocation, a
    torchrun --standalone a node), each judged on its own ranks; the analysis shown is the
    world whose verdict is the most severe (the first such), every world's hang verdict is
    listed, its summary prefixed with the world's label."""
    judged = [(label, _diagnose(world)) for label, world in packed]

    def first_severity(item: tuple[str, Analysis]) -> int:
        verdicts = item[1].verdicts
        return severity_rank(verdicts[0].severity) if verdicts else len(Severity)

    order = sorted(range(len(judged)), key=lambda i: first_severity(judged[i]))
    chosen_label, chosen = judged[order[0]]
    verdicts: list[Verdict] = []
    seen: set[tuple[str, str]] = set()
    for i in order:
        label, analysis = judged[i]
        for v in analysis.verdicts:
            if v.kind in HANG_KINDS or v.kind == VerdictKind.PROGRESSING:
                verdicts.append(replace(v, summary=f"{label}: {v.summary}"))
            elif (v.kind, v.summary) not in seen:  # the job's log, NICs, GPUs: once
                verdicts.append(v)
            seen.add((v.kind, v.summary))
    verdicts.sort(key=lambda v: severity_rank(v.severity))
    lines = [f"{label}: {a.verdicts[0].kind} ({a.verdicts[0].severity})" if a.verdicts
             else f"{label}: no verdict" for label, a in judged]
    one_step = len({label.split(" on ", 1)[0] for label, _ in judged}) == 1
    how = ("worlds of their own in one step, one a node or group of nodes (a `torchrun "
           "--standalone` on each node, or a rendezvous of its own each: if they were meant to "
           "be one job, give every node's launcher the same rendezvous endpoint and id)"
           if one_step else "steps of their own")
    note = (f"the job runs {len(judged)} trainings as {how}, each numbering its ranks from 0: "
            f"each is judged on its own ranks; the ranks and stacks shown are {chosen_label}'s; "
            + "; ".join(lines))
    return replace(chosen, verdicts=tuple(verdicts), notes=(note, *chosen.notes))


#: The least silence of the job's output files the evidence says (s): a job that logs its
#: steps writes more often than this; under it, the silence tells nothing.
OUTPUT_SAID_S = 60.0


def _with_output_silence(snapshot: Snapshot, verdict: Verdict) -> Verdict:
    """The job's first verdict with how long its output files have been silent, when that is a
    minute or more: the first thing an engineer checks, said as the file's fact. Never a
    verdict of its own: a rank's prints may wait in its own buffer (Python's stdout to a file
    is block-buffered without ``-u`` or ``flush=True``), and a job may log once an epoch; with
    a hang verdict it is the time the job has been silent at least, with progress a contrast
    worth knowing (the stacks move, the files do not)."""
    quiet = snapshot.job.output_quiet_s
    if quiet is None or quiet < OUTPUT_SAID_S:
        return verdict
    from slurmdiag.config import output_silence  # only for a silent job's look

    where = snapshot.job.stdout or snapshot.job.stderr or "its output"
    line = f"the job's output ({where}) was last written {output_silence(quiet)} before the look ended"
    if verdict.kind == VerdictKind.PROGRESSING:
        line += (", although its stacks move: its ranks may hold their prints in a buffer "
                 "(python -u, PYTHONUNBUFFERED=1 or print(..., flush=True) writes them at once) "
                 "or log seldom")
    elif verdict.kind in (*HANG_KINDS, VerdictKind.SLOW_STEP):
        line += ": no line from any rank since (unless its ranks hold their prints in a buffer)"
    else:
        return verdict
    return _with_evidence(verdict, [line])


def _diagnose(snapshot: Snapshot) -> Analysis:
    merge = merge_stacks(snapshot)
    layout = _expected_ranks(snapshot, merge)
    statuses = _program_on_a_thread(_through_a_thread([_status(merge, d) for d in merge.digests]))
    hang, hung = _hang_verdicts(snapshot, merge, statuses, layout)
    # A rank that reached its place during the look made the look "progress", or made its own
    # site a function's (it moved): judged again on the samples after the arrival.
    moved = {d.rank for d in merge.digests if not d.settled}
    culprit_moved = bool(hang and hang[0].kind in HANG_KINDS
                         and moved & set(hang[0].culprit_ranks))
    arrival = hang and (hang[0].kind == VerdictKind.PROGRESSING or culprit_moved)
    cut = _settled_tail(snapshot, merge, anywhere=culprit_moved) if arrival else None
    if cut is not None:
        tail, why = cut
        tail_merge = merge_stacks(tail)
        if all(_measured_work(d) is False for d in tail_merge.digests):
            tail_layout = _expected_ranks(tail, tail_merge)
            tail_statuses = _program_on_a_thread(
                _through_a_thread([_status(tail_merge, d) for d in tail_merge.digests]))
            tail_hang, tail_hung = _hang_verdicts(tail, tail_merge, tail_statuses, tail_layout)
            if tail_hung:
                merge, layout, statuses = tail_merge, tail_layout, tail_statuses
                hang = [_with_evidence(v, [why]) if i == 0 else v for i, v in enumerate(tail_hang)]
                hung = tail_hung

    hang = [_with_exit_evidence(snapshot, v) if v.kind == VerdictKind.MISSING_RANK else v for v in hang]
    hang = [_with_caught_error(snapshot, v, statuses) for v in hang]
    hang = [_with_output_silence(snapshot, v) if i == 0 else v for i, v in enumerate(hang)]
    disagreement = watchdog_disagreement(snapshot)
    if disagreement:
        hang = [
            _with_evidence(v, [disagreement]) if v.kind == VerdictKind.MISMATCHED_COLLECTIVE else v
            for v in hang
        ]
    others: list[Verdict] = []
    progressing = any(v.kind == VerdictKind.PROGRESSING for v in hang)
    for v in watchdog_findings(snapshot):
        # a timeout in the log while the stacks move: an earlier incident (or restart)
        others.append(replace(v, severity="warning") if progressing else v)
    others.extend(flight_verdicts(snapshot.flight_recorder))
    others.extend(nic_findings(snapshot))
    others.extend(gpu_findings(snapshot, hung=hung))
    if snapshot.probe is not None:
        from slurmdiag.probe.analysis import probe_verdicts

        others.extend(probe_verdicts(snapshot.probe))
        if not snapshot.nodes:
            hang = []  # a probe alone collected no stacks: no hang verdict either way
    if others:
        pointers = [f"see {v.kind}: {v.summary}" for v in others if v.severity != "info"][:4]
        if pointers:
            hang = [_with_evidence(v, pointers) if v.kind == VerdictKind.ALL_WAITING else v for v in hang]
    if layout.failed_nodes and snapshot.nodes and not any(v.kind == VerdictKind.INCOMPLETE for v in hang):
        failed = [n for n in snapshot.nodes if n.status != NodeStatus.OK]
        others.append(
            Verdict(
                kind=VerdictKind.INCOMPLETE,
                severity="warning",
                summary=f"{len(layout.failed_nodes)} node(s) did not report "
                f"({', '.join(layout.failed_nodes[:8])}); "
                + (
                    f"{_ranks_label(layout.unknown)} unknown"
                    if layout.unknown
                    else "their ranks are unknown"
                ),
                evidence=tuple(
                    f"{n.name}: {n.status}: {n.message or ''}".rstrip(": ") for n in failed[:8]
                ),
                next_step=NEXT_STEPS["incomplete"],
            )
        )
    verdicts = sorted(
        enumerate(hang + others), key=lambda iv: (severity_rank(iv[1].severity), iv[0])
    )
    notes = list(merge.notes) + list(layout.notes)
    if merge.unidentified:
        notes.append(
            f"{len(merge.unidentified)} process(es) without a rank left out: "
            + ", ".join(f"{n.name} pid {p.pid}" for n, p in merge.unidentified[:8])
        )
    apart = set_apart_note(snapshot)
    if apart:
        notes.append(apart)
    if merge.duplicates:
        notes.append(
            "several processes claim one rank; kept the first readable one, left out: "
            + ", ".join(f"rank {p.rank} {n.name} pid {p.pid}" for n, p in merge.duplicates[:8])
        )
    return Analysis(
        classes=tuple(merge.classes),
        tree=merge.tree,
        ranks=tuple(_view(s) for s in statuses),
        missing_ranks=layout.missing,
        unknown_ranks=layout.unknown,
        world_size=layout.world_size,
        samples=merge.max_samples,
        verdicts=tuple(v for _, v in verdicts),
        notes=tuple(notes),
    )

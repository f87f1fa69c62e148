"""Merge the Python stacks of every rank: frame kinds, equivalence classes, prefix tree.

The LLNL STAT idea for Python. Each rank contributes the main-thread stack of each of its K
samples. Ranks with identical stacks form an equivalence class (2D view); over the samples a
rank is *stationary* when its stack is the same in every sample and *moving* otherwise (3D
view). Moving ranks are grouped by the stack prefix that stayed put plus the function they move
in, so a rank spinning in a loop is reported by function rather than by a line that changes.

Stacks are compared by ``(file, function, line)`` of every frame. Each distinct stack is
described once (``StackTable``): a job of 32k ranks mostly holds a handful of distinct stacks,
so the per-rank cost is one tuple build and one dict lookup per sample.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from operator import attrgetter

from slurmdiag.analysis.model import ClassifiedFrame, StackClass, TreeNode
from slurmdiag.hostlist import format_int_ranges
from slurmdiag.snapshot import BlockedCall, Frame, Node, Rank, Sample, Snapshot, ThreadStack
from slurmdiag.vocabulary import NodeStatus

__all__ = [
    "BLOCKING_KINDS",
    "RankDigest",
    "StackInfo",
    "StackMerge",
    "StackTable",
    "classify_frame",
    "entry_root",
    "format_int_ranges",
    "frame_site",
    "function_site",
    "is_idle_thread",
    "is_user_file",
    "job_code",
    "main_thread",
    "merge_stacks",
    "own_roots",
    "pick_main_thread",
]

# Kinds that decide what a stack is doing, strongest first: a queue wait inside a DataLoader is
# data loading, a lock taken inside a collective is the collective.
_DECISIVE = ("collective", "data_loading", "io", "lock", "sleep")
BLOCKING_KINDS = frozenset({"data_loading", "io", "lock", "sleep"})

# ---------------------------------------------------------------------------------------------
# user vs library files

# `test` and friends are stdlib names that user scripts also carry (test.py); a relative py-spy
# path `test.py` is far more often the user's own script.
_STDLIB = frozenset(sys.stdlib_module_names) - {"test", "this", "antigravity", "__main__"}
# Third-party top-level packages seen in training stacks. Megatron is absent on purpose: in
# Megatron-LM and Megatron-DeepSpeed checkouts `megatron/` is the user's own code.
_LIBRARY_PACKAGES = frozenset(
    {
        "torch",
        "torchvision",
        "torchaudio",
        "torchtext",
        "torchdata",
        "functorch",
        "triton",
        "deepspeed",
        "accelerate",
        "transformers",
        "datasets",
        "tokenizers",
        "safetensors",
        "huggingface_hub",
        "peft",
        "trl",
        "timm",
        "apex",
        "fairscale",
        "lightning",
        "pytorch_lightning",
        "lightning_fabric",
        "lightning_utilities",
        "torchmetrics",
        "colossalai",
        "horovod",
        "xformers",
        "flash_attn",
        "megatron_core",
        "transformer_engine",
        "numpy",
        "scipy",
        "pandas",
        "pyarrow",
        "einops",
        "tqdm",
        "wandb",
        "tensorboard",
        "tensorboardX",
        "mlflow",
        "hydra",
        "omegaconf",
        "submitit",
        "ray",
        "mpi4py",
        "zmq",
        "grpc",
        "google",
        "requests",
        "urllib3",
        "boto3",
        "botocore",
        "s3transfer",
        "fsspec",
        "s3fs",
        "gcsfs",
        "h5py",
        "filelock",
        "psutil",
        "pydantic",
        "yaml",
        "setuptools",
        "pkg_resources",
        "importlib_metadata",
        "_pytest",
        "pytest",
        "pluggy",
        "vllm",
        "sglang",
    }
)
# In absolute paths outside site-packages (source checkouts, editable installs) only these
# unmistakable package directories mark a library.
_LIBRARY_DIRS = frozenset(
    {
        "torch",
        "deepspeed",
        "accelerate",
        "transformers",
        "apex",
        "fairscale",
        "lightning",
        "pytorch_lightning",
        "triton",
        "xformers",
        "transformer_engine",
    }
)
_PY_LIB_RE = re.compile(r"/lib(?:64)?/(?:pypy|python)\d+(?:\.\d+)?[a-z]?/")
_MARKERS = ("/site-packages/", "/dist-packages/")


# The job's own code installed as a package (`pip install .` in an image, a console script,
# `python -m trainpkg` under torchrun): its frames sit in site-packages like any library's.
# The roots (".../site-packages/trainpkg") of the packages the ranks' programs start in, for
# the snapshot being analysed (``job_code``); empty outside one.
_OWN_ROOTS: ContextVar[frozenset[str]] = ContextVar("slurmdiag_own_roots", default=frozenset())


def _installed_root(p: str) -> tuple[str, str] | None:
    """(root, path from the import root) of a site-packages file: (".../site-packages/pkg",
    "pkg/mod.py"); a single-module install's root ends in its module's name."""
    for marker in _MARKERS:
        at = p.rfind(marker)
        if at >= 0:
            relative = p[at + len(marker) :]
            return p[: at + len(marker)] + relative.split("/", 1)[0].removesuffix(".py"), relative
    return None


def _module_path(path: str) -> tuple[str, bool]:
    """(path relative to the import root, is_user) for a frame's file name."""
    if not path:
        return "", False
    if path.startswith("<"):
        # <frozen importlib._bootstrap>, <__array_function__ internals>: library; exec'd code
        # (`python -c`, stdin) is the user's own.
        return path, path in ("<string>", "<stdin>")
    p = path.replace("\\", "/")
    installed = _installed_root(p)
    if installed is not None:
        return installed[1], installed[0] in _OWN_ROOTS.get()
    match = _PY_LIB_RE.search(p)
    if match:
        return p[match.end() :], False
    if p.startswith("/"):
        parts = p.split("/")
        for i in range(len(parts) - 2, 0, -1):
            if parts[i] in _LIBRARY_DIRS:
                return "/".join(parts[i:]), False
            if parts[i].startswith("torchinductor_"):
                # torch.compile's generated modules (/tmp/torchinductor_<user>/7r/c7rez....py):
                # torch's code, not the job's
                return "/".join(parts[i:]), False
        return p, True
    # A relative path: py-spy's short file name, relative to the sys.path entry it came from.
    first = p.split("/", 1)[0]
    first = first.removesuffix(".py")
    if first in _STDLIB or first in _LIBRARY_PACKAGES:
        return p, False
    return p, True


def is_user_file(path: str) -> bool:
    """True for the job's own code: not site-packages, dist-packages, the stdlib or <frozen>."""
    return _module_path(path)[1]


def library_path(path: str) -> str:
    """A library frame's file relative to its import root: torch/utils/file_baton.py."""
    return _module_path(path)[0]


def entry_root(frames: Sequence[Frame]) -> str | None:
    """The installed package a main thread's program starts in (``frames`` innermost first, as
    a stack or a traceback), when nothing of the job's own (a file outside site-packages)
    comes before it and it is no known library.

    Walked outermost first, past what starts a program rather than being it: the stdlib's
    frames (runpy, multiprocessing's spawn), known libraries' (submitit, torch's spawn),
    ``python -c``, and a console script's stub (no .py: pip's ``from trainpkg.cli import main;
    sys.exit(main())``)."""
    root, through_script = script_entry(frames)
    return None if through_script else root


def script_entry(frames: Sequence[Frame]) -> tuple[str | None, bool]:
    """entry_root's walk, and one step further: when the program is a script of the job's own
    whose module level calls straight into an installed package that is no known library (a
    thin ``train.py``: ``from trainpkg.cli import main; main()``), (that package, True).
    Whether it is the job's code then is the caller's to judge (own_package_roots: only when
    every rank's program enters it so)."""
    outermost = True
    script = False
    for frame in reversed(frames):
        if frame.native:
            continue
        if outermost and frame.function == "_bootstrap":  # a thread's, not the program's
            return None, False
        outermost = False
        key = (frame.file, frame.function)
        step = _ENTRY_STEPS.get(key)
        if step is None:
            step = _entry_step(frame.file, frame.function)
            if len(_ENTRY_STEPS) < 100_000:
                _ENTRY_STEPS[key] = step
        if script:
            return (step, True) if step not in ("", _PAST) else (None, False)
        if step == "" and frame.function == "<module>" and not frame.file.startswith("<"):
            script = True  # the job's own script at module level: what does it call?
            continue
        if step != _PAST:
            return step or None, False
    return None, False


_PAST = "past"  # a frame that starts the program: look at the next one
_ENTRY_STEPS: dict[tuple[str, str], str] = {}


def _entry_step(file: str, function: str) -> str:
    """One frame of ``entry_root``'s walk: _PAST, the root of the job's installed package, or
    "" (the job's own file, or anything else: no package to claim)."""
    if file.startswith("<"):
        launches = file.startswith("<frozen") or (
            file in ("<string>", "<stdin>") and function == "<module>")
        return _PAST if launches else ""
    path = file.replace("\\", "/")
    installed = _installed_root(path)
    if installed is not None:
        package = installed[0].rsplit("/", 1)[1]
        if package in _LIBRARY_PACKAGES or package in _LIBRARY_DIRS or package in _STDLIB:
            return _PAST
        return installed[0]
    if not _module_path(path)[1]:  # the stdlib
        return _PAST
    if function == "<module>" and not path.endswith(".py"):  # a console script's stub
        return _PAST
    return ""


def own_package_roots(ranks: Iterable[Rank]) -> frozenset[str]:
    """The installed packages the ranks' programs start in (``entry_root`` of each rank's
    first stack of its first sample that has one): the job's own code; and the one a thin
    script of the job's own calls when every rank's program enters it so (agreed_script_roots)."""
    entries = []
    for rank in ranks:
        for sample in rank.samples:
            if sample.threads:
                entries.append(next(
                    (e for e in (script_entry(t.frames) for t in sample.threads) if e[0]),
                    (None, False)))
                break
    direct = {root for root, script in entries if root and not script}
    return frozenset(direct) | agreed_script_roots(entries)


def agreed_script_roots(entries: Iterable[tuple[str | None, bool]]) -> frozenset[str]:
    """The package of ``script_entry`` answers (one a rank's program, or a traceback) that
    every program not started in its package directly (a console script, ``python -m``)
    enters from a script of the job's own: one package by name (each task's may sit in a
    site-packages of its own). A script whose module level calls an unknown library on one
    rank (where it hangs) and torch on the others keeps its own lines as the job's code."""
    through = [(root, script) for root, script in entries if not (root and not script)]
    names = {root.rsplit("/", 1)[-1] if root and script else None for root, script in through}
    if len(names) != 1 or None in names:
        return frozenset()
    return frozenset(root for root, _ in through if root)


@contextmanager
def job_code(snapshot: Snapshot) -> Iterator[frozenset[str]]:
    """Within it, frames of the installed packages the job's programs start in are the job's
    own (``is_user_file``, frame kinds, sites): a training package installed with pip and run
    by its console script or ``python -m`` is the user's code, not a library."""
    with own_roots(own_package_roots(r for n in snapshot.nodes for r in n.ranks)) as roots:
        yield roots


@contextmanager
def own_roots(roots: frozenset[str]) -> Iterator[frozenset[str]]:
    """Within it, the installed packages ``roots`` (".../site-packages/pkg") are the job's."""
    token = _OWN_ROOTS.set(roots)
    try:
        yield roots
    finally:
        _OWN_ROOTS.reset(token)


# ---------------------------------------------------------------------------------------------
# frame kinds

COLLECTIVE_OPS = frozenset(
    {
        "barrier",
        "monitored_barrier",
        "all_reduce",
        "all_reduce_coalesced",
        "all_gather",
        "all_gather_into_tensor",
        "_all_gather_base",
        "all_gather_coalesced",
        "all_gather_object",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "_reduce_scatter_base",
        "broadcast",
        "broadcast_object_list",
        "send",
        "recv",
        "isend",
        "irecv",
        "send_object_list",
        "recv_object_list",
        "batch_isend_irecv",
        "all_to_all",
        "all_to_all_single",
        "gather",
        "gather_object",
        "scatter",
        "scatter_object_list",
        "reduce",
        "_store_based_barrier",
        "wait",
        "wait_tensor",
        "new_group",
        "init_process_group",
        "init_device_mesh",
    }
)
# The op of a pipeline schedule's point-to-point wait (torch.distributed.pipelining, Megatron).
PIPELINE_P2P = "pipeline_p2p"
# Waiting for peers while the process group forms: a rank missing at start-up hangs here.
_RENDEZVOUS_FUNCS = frozenset(
    {
        "rendezvous",
        "_create_c10d_store",
        "_env_rendezvous_handler",
        "_tcp_rendezvous_handler",
        "_rendezvous_helper",
        "_new_process_group_helper",
        "_wait_for_workers",
        "next_rendezvous",
    }
)
_COLLECTIVE_WORDS = (
    "all_reduce",
    "allreduce",
    "all_gather",
    "allgather",
    "reduce_scatter",
    "reducescatter",
    "broadcast",
    "bcast",
    "barrier",
    "all_to_all",
    "alltoall",
)
_ACCELERATE_COLLECTIVES = frozenset(
    {
        "wait_for_everyone",
        "gather",
        "gather_for_metrics",
        "reduce",
        "broadcast",
        "pad_across_processes",
        "_gpu_gather",
        "_cpu_gather",
        "_tpu_gather",
        "_gpu_gather_object",
        "gather_object",
        "broadcast_object_list",
        "_gpu_broadcast",
        "_tpu_broadcast",
        "main_process_first",
        "_goes_first",
        "local_main_process_first",
    }
)
_DDP_COLLECTIVES = frozenset(
    {
        "_sync_buffers",
        "_sync_params",
        "_distributed_broadcast_coalesced",
        "_sync_module_buffers",
        "_default_broadcast_coalesced",
        "_sync_final_model",
        "_check_global_requires_backward_grad_sync",
        "_match_all_reduce_for_bwd_pass",
        "_match_unused_params_allreduce",
        "_check_and_sync_module_buffers",
    }
)
_DATALOADER_FUNCS = frozenset(
    {
        "__next__",
        "_next_data",
        "_get_data",
        "_try_get_data",
        "_next_index",
        "fetch",
        "_get_iterator",
        "__iter__",
        "_reset",
        "_shutdown_workers",
        "_worker_loop",
        "_pin_memory_loop",
        "_process_data",
    }
)
_IO_FUNCS = frozenset(
    {
        "read",
        "readinto",
        "readline",
        "readlines",
        "read1",
        "recv",
        "recv_into",
        "recvfrom",
        "recvmsg",
        "recv_bytes",
        "_recv_bytes",
        "_recv",
        "accept",
        "connect",
        "create_connection",
        "getaddrinfo",
        "select",
        "poll",
        "_poll",
        "sendall",
        "send",
        "_send",
        "sendmsg",
        "write",
        "flush",
        "communicate",
        "_communicate",
        "_wait",
        "_try_wait",
        "wait",
        "do_handshake",
        "urlopen",
        "getresponse",
        "_read_status",
        "begin",
        "_safe_read",
        "makefile",
        "copyfileobj",
        "copyfile",
        "copy",
        "copy2",
        "copytree",
        "rmtree",
        "save",
        "load",
        "_save",
        "_load",
        "_open_file",
        "_open_zipfile_writer",
        "_run_once",
    }
)
_IO_MODULES = (
    "socket.py",
    "ssl.py",
    "selectors.py",
    "subprocess.py",
    "multiprocessing/connection.py",
    "http/",
    "urllib/",
    "asyncio/",
    "shutil.py",
    "torch/serialization.py",
    "requests/",
    "urllib3/",
    "botocore/",
    "boto3/",
    "s3transfer/",
    "fsspec/",
    "s3fs/",
    "gcsfs/",
    "h5py/",
    "huggingface_hub/",
    "torch/distributed/checkpoint/",
)
_LOCK_MODULES = (
    "threading.py",
    "multiprocessing/synchronize.py",
    "concurrent/futures/",
    "filelock/",
    "multiprocessing/pool.py",
    "multiprocessing/managers.py",
)
_LOCK_FUNCS = frozenset(
    {
        "wait",
        "acquire",
        "join",
        "_wait_for_tstate_lock",
        "__enter__",
        "result",
        "as_completed",
        "get",
        "_wait_for_updates",
        "wait_for",
    }
)
_NATIVE_SLEEP = frozenset({"clock_nanosleep", "nanosleep", "time_sleep", "pysleep", "usleep"})
_NATIVE_LOCK = frozenset(
    {
        "pthread_cond_wait",
        "pthread_cond_timedwait",
        "futex_wait",
        "futex_abstimed_wait",
        "futex_abstimed_wait_cancelable",
        "sem_wait",
        "sem_timedwait",
        "pthread_mutex_lock",
        "take_gil",
        "PyThread_acquire_lock_timed",
        "acquire_timed",
        "lock_PyThread_acquire_lock",
    }
)
_NATIVE_IO = frozenset(
    {
        "epoll_wait",
        "epoll_pwait",
        "poll",
        "ppoll",
        "select",
        "pselect",
        "recv",
        "recvfrom",
        "recvmsg",
        "read",
        "pread64",
        "accept",
        "accept4",
        "connect",
        "waitpid",
        "wait4",
    }
)
_NATIVE_COLLECTIVE = ("nccl", "gloo::", "c10d::", "ProcessGroupNCCL", "ProcessGroupGloo")


@dataclass(frozen=True, slots=True)
class _FrameTraits:
    kind: str
    is_user: bool
    op: str | None = None  # a collective's name, for naming the collective of a stack
    torch_op: bool = False  # a torch.distributed API function (the name users know)


def _has_collective_word(function: str) -> bool:
    name = function.lower()
    return any(word in name for word in _COLLECTIVE_WORDS)


def _traits(file: str, function: str, native: bool) -> _FrameTraits:
    if native:
        if any(word in function for word in _NATIVE_COLLECTIVE):
            return _FrameTraits("collective", False, function)
        # glibc symbols come as __libc_recv, __GI___poll, __futex_abstimed_wait_common64...
        bare = function.split("(", 1)[0].lstrip("_").removeprefix("GI_").lstrip("_")
        bare = bare.removeprefix("libc_").removesuffix("64").removesuffix("_common")
        if bare in _NATIVE_SLEEP:
            return _FrameTraits("sleep", False)
        if bare in _NATIVE_LOCK or bare.startswith("futex_"):
            return _FrameTraits("lock", False)
        if bare in _NATIVE_IO:
            return _FrameTraits("io", False)
        return _FrameTraits("native", False)
    mod, user = _module_path(file)
    # py-spy >= 0.4 on Python >= 3.11 prints qualified names: Condition.wait, Queue.get
    function = function.rsplit(".", 1)[-1] if "." in function else function
    if mod.startswith("torch/distributed/"):
        if mod.endswith("c10d_logger.py"):
            # the @_exception_logger / @_time_logger `wrapper` around every c10d collective
            return _FrameTraits("collective", False)
        if function in COLLECTIVE_OPS:
            return _FrameTraits("collective", False, function, torch_op=True)
        if function in _RENDEZVOUS_FUNCS or "rendezvous" in mod:
            return _FrameTraits("collective", False, "rendezvous")
        if mod.startswith("torch/distributed/checkpoint/"):
            return _FrameTraits("io", False)
        if mod.startswith("torch/distributed/pipelining/") and "p2p" in function:
            # a pipeline schedule's wait of the sends and receives it batched (_wait_batch_p2p
            # of batch_isend_irecv's works): no c10d frame above it (pipeline_stage_spinning)
            return _FrameTraits("collective", False, PIPELINE_P2P)
        if _has_collective_word(function) or (
            "_functional_collectives" in mod and function.startswith("wait")
        ):
            return _FrameTraits("collective", False, function)
        return _FrameTraits("library", False)
    if mod in ("torch/autograd/graph.py", "torch/autograd/__init__.py") and function in (
        "_engine_run_backward",
        "backward",
        "grad",
        "run_backward",
    ):
        # A main thread parked in the autograd engine, idle across samples, is DDP's reducer
        # (or FSDP's/ZeRO's hooks) waiting for the gradient all_reduce of the last bucket.
        return _FrameTraits("collective", False, "backward")
    if mod.startswith("torch/nn/parallel/distributed.py") and (
        function in _DDP_COLLECTIVES or _has_collective_word(function)
    ):
        return _FrameTraits("collective", False, function)
    if mod.startswith("torch/utils/data/"):
        if function in _DATALOADER_FUNCS:
            return _FrameTraits("data_loading", False)
        return _FrameTraits("library", False)
    if mod.startswith("deepspeed/"):
        if mod.startswith("deepspeed/comm/"):
            op = function if function in COLLECTIVE_OPS or _has_collective_word(function) else None
            return _FrameTraits("collective", False, op)
        if function in COLLECTIVE_OPS or _has_collective_word(function):
            return _FrameTraits("collective", False, function)
        return _FrameTraits("library", False)
    # Megatron is the user's checkout (absolute path) or megatron-core in site-packages
    if any(
        m in mod for m in ("megatron/core/tensor_parallel/mappings.py", "megatron/mpu/mappings.py")
    ):
        if not function.startswith("_split"):
            return _FrameTraits("collective", user, None)
        return _FrameTraits("user" if user else "library", user)
    if any(
        m in mod for m in ("megatron/core/parallel_state.py", "megatron/mpu/initialize.py")
    ) and (function in COLLECTIVE_OPS or _has_collective_word(function) or "group" in function):
        return _FrameTraits("collective", user, None)
    if "megatron/core/pipeline_parallel/p2p_communication.py" in mod:
        # Megatron's pipeline sends and receives (recv_forward, _communicate, ...): the same
        # waits as torch's pipelining schedules, its own module
        return _FrameTraits("collective", user, PIPELINE_P2P)
    if mod.startswith("accelerate/") and (
        function in _ACCELERATE_COLLECTIVES or _has_collective_word(function)
    ):
        return _FrameTraits("collective", False, function)
    if mod.startswith(("lightning/", "pytorch_lightning/", "lightning_fabric/", "fairscale/")) and (
        function in COLLECTIVE_OPS or _has_collective_word(function)
    ):
        return _FrameTraits("collective", False, function)
    if mod in ("queue.py", "multiprocessing/queues.py") and function == "get":
        return _FrameTraits("data_loading", False)
    if not user:
        if mod.startswith(_IO_MODULES) and function in _IO_FUNCS:
            return _FrameTraits("io", False)
        if mod.startswith(_LOCK_MODULES) and function in _LOCK_FUNCS:
            return _FrameTraits("lock", False)
        if mod == "time.py" and function == "sleep":
            return _FrameTraits("sleep", False)
        return _FrameTraits("library", False)
    return _FrameTraits("user", True)


_TRAITS_CACHE: dict[tuple[str, str, bool, frozenset[str]], _FrameTraits] = {}


def _frame_traits(frame: Frame) -> _FrameTraits:
    key = (frame.file, frame.function, frame.native, _OWN_ROOTS.get())
    traits = _TRAITS_CACHE.get(key)
    if traits is None:
        traits = _traits(frame.file or "", frame.function or "", frame.native)
        if len(_TRAITS_CACHE) < 200_000:
            _TRAITS_CACHE[key] = traits
    return traits


def classify_frame(frame: Frame) -> ClassifiedFrame:
    """The kind of one frame (collective, data_loading, io, lock, sleep, user, library, native)."""
    traits = _frame_traits(frame)
    return ClassifiedFrame(frame=frame, kind=traits.kind, is_user=traits.is_user)


def frame_site(frame: Frame) -> str:
    """``file:line`` (``file:function`` when the line is unknown)."""
    if frame.line is None:
        return f"{frame.file}:{frame.function}"
    return f"{frame.file}:{frame.line}"


# A comprehension's own frame, as py-spy qualifies it on Python 3.11 (``f.<locals>.<listcomp>``).
_COMPREHENSION = re.compile(r"(?:(?:\.<locals>)?\.<(?:listcomp|dictcomp|setcomp|genexpr)>)+$")


def function_site(frame: Frame) -> str:
    """``file:function``, the site of a rank that moves inside a function. A comprehension's
    frame is its function's (Python 3.12 inlines comprehensions, PEP 709: a loop spinning in
    one is in its function there; pipeline_stage_spinning on 3.11 moved in
    ``finite_targets.<locals>.<listcomp>``)."""
    function = _COMPREHENSION.sub("", frame.function) or frame.function
    return f"{frame.file}:{function}"


# Where an idle helper thread parks: a wait primitive of the stdlib's threading and queue
# machinery, with no user frame anywhere on its stack.
_PARKED_KINDS = frozenset({"lock", "io", "sleep", "data_loading"})

#: How the main thread of a sample was chosen (RankDigest.main_rule), most trusted first.
MAIN_RULES = ("os_thread_id", "name", "not_idle", "first")


def is_idle_thread(thread: ThreadStack) -> bool:
    """A helper thread parked in a wait with none of the job's own code on its stack.

    Queue feeders, pin-memory and tqdm monitor threads, thread pools in ``Condition.wait``,
    watchdog and store threads: recognised by their frames, never by their names (names are
    the user's). A thread with no Python frame at all is idle too.
    """
    python = [f for f in thread.frames if not f.native]
    if not python:
        return True
    traits = [_frame_traits(f) for f in python]
    if any(t.is_user for t in traits):
        return False
    return traits[0].kind in _PARKED_KINDS or not thread.active


def program_ended(frames: Sequence[Frame]) -> bool:
    """A main thread whose program has returned: Python frames, none of them a module's body.

    While a program runs, its main thread's stack starts at the ``<module>`` of the script
    (under runpy's frames for ``python -m``, under multiprocessing's for a spawned child).
    After the script's last line Python joins the non-daemon threads (``threading._shutdown``)
    and runs the atexit handlers: their frames hang from nothing. A multiprocessing child calls
    ``threading._shutdown`` itself once its target returned: that frame says it too."""
    python = [f for f in frames if not f.native]
    if any(f.function.endswith("_bootstrap") and f.file.endswith("threading.py")
           for f in python):
        return False  # a thread's stack starts in threading's _bootstrap: not a main thread
    if any(f.function == "_shutdown" and f.file.endswith("threading.py") for f in python):
        # multiprocessing's child (mp.spawn's ranks) joins its threads itself once its target
        # returned, under its own <module>
        return True
    return bool(python) and not any(f.function == "<module>" for f in python)


def pick_main_thread(sample: Sample, pid: int | None = None) -> tuple[ThreadStack | None, str]:
    """The sample's main thread and the rule that found it (one of MAIN_RULES).

    The main thread is the one whose OS thread id equals the process id. Without OS ids
    (py-spy's text output, another PID namespace): the thread named MainThread, else the first
    thread that is not an idle helper, else the first thread with frames.
    """
    threads = sample.threads
    if pid is not None:
        for thread in threads:
            if thread.os_thread_id == pid:
                return thread, "os_thread_id"
    for thread in threads:
        if thread.name == "MainThread":
            return thread, "name"
    for thread in threads:
        if thread.frames and not is_idle_thread(thread):
            return thread, "not_idle"
    for thread in threads:
        if thread.frames:
            return thread, "first"
    return (threads[0] if threads else None), "first"


def main_thread(sample: Sample, pid: int | None = None) -> ThreadStack | None:
    """The main thread of a sample (see pick_main_thread)."""
    return pick_main_thread(sample, pid)[0]


# ---------------------------------------------------------------------------------------------
# distinct stacks

_FRAME_KEY = attrgetter("file", "function", "line")
FrameKey = tuple[str, str, "int | None"]


def _frame_key(frame: Frame) -> FrameKey:
    """What makes two frames the same; an unresolved native frame is named by its library only.

    With --native, py-spy prints frames it cannot symbolise as their address (``0x7f...``),
    which differs between processes (ASLR): keyed by address, no two ranks would ever share a
    stack.
    """
    if frame.native and (not frame.function or frame.function.startswith("0x")):
        return (frame.file, "<native>", None)
    return (frame.file, frame.function, frame.line)


@dataclass(frozen=True, slots=True)
class StackInfo:
    """What one distinct stack is doing; frames innermost first, as py-spy prints them."""

    frames: tuple[Frame, ...]
    keys: tuple[FrameKey, ...]
    classified: tuple[ClassifiedFrame, ...]
    kind: str
    op: str | None  # the collective waited in (torch.distributed name when there is one)
    position: tuple[FrameKey, ...] | None  # frames from the collective outward
    top_user_frame: Frame | None  # innermost user frame that is not a collective wrapper
    top_frame: Frame | None
    site: str | None  # file:line of top_user_frame (of top_frame when no user frame)
    detail: str  # "all_reduce (torch/distributed/distributed_c10d.py:1316)"


# torch.distributed's own code that waits on no peer when a thread sits in it: torchrun and its
# agent (the monitor loop sleeps, polls its workers; its rendezvous is "collective" already),
# checkpoint I/O (already "io").
_DISTRIBUTED_NOT_PEER_WAITS = ("torch/distributed/elastic/", "torch/distributed/checkpoint/",
                               "torch/distributed/run.py", "torch/distributed/launcher/")


def _distributed_wait(frames: tuple[Frame, ...], traits: list[_FrameTraits]) -> int | None:
    """The index of the stack's innermost Python frame when it is torch.distributed's own code
    (not a collective of the c10d API): the blocking call below it has no frame of its own, a
    Work's or a Future's wait, a store's get (ZeroRedundancyOptimizer._sync_params waiting on its
    broadcasts' handles in a list comprehension: zero_optimizer_straggler). Only frames of C
    code may sit above it (--native)."""
    for i, (frame, trait) in enumerate(zip(frames, traits, strict=True)):
        if frame.native:
            continue
        if trait.kind != "library":
            return None
        mod = _module_path(frame.file or "")[0]
        if mod.startswith("torch/distributed/") and not mod.startswith(_DISTRIBUTED_NOT_PEER_WAITS):
            return i
        return None
    return None


def _describe(frames: tuple[Frame, ...], keys: tuple[FrameKey, ...]) -> StackInfo:
    traits = [_frame_traits(f) for f in frames]
    waits = _distributed_wait(frames, traits)
    if waits is not None:
        # named by its function (a comprehension's, its function's: _sync_params)
        name = _COMPREHENSION.sub("", frames[waits].function or "").rsplit(".", 1)[-1]
        traits[waits] = _FrameTraits("collective", False, name or None)
    classified = tuple(
        ClassifiedFrame(frame=f, kind=t.kind, is_user=t.is_user)
        for f, t in zip(frames, traits, strict=True)
    )
    # The innermost run: frames below the first user frame that is not a collective wrapper.
    run_end = len(frames)
    for i, t in enumerate(traits):
        if t.is_user and t.kind != "collective":
            run_end = i
            break
    run_kinds = {traits[i].kind for i in range(run_end)}
    kind = next((k for k in _DECISIVE if k in run_kinds), None)
    if kind is None:
        if run_end == 0:
            kind = "user"
        elif all(t.kind == "native" for t in traits[:run_end]):
            kind = "native"
        else:
            kind = "library"
    op: str | None = None
    position: tuple[FrameKey, ...] | None = None
    if kind == "collective":
        # With --native the run interleaves C++ frames (c10d::Work::wait, pybind11 glue) with
        # the Python ones: the op is named by the outermost frame that carries a torch name.
        first = next(i for i in range(run_end) if traits[i].kind == "collective")
        span = [first]
        j = first + 1
        while j < len(frames) and (traits[j].kind == "collective" or frames[j].native):
            if traits[j].kind == "collective":
                span.append(j)
            j += 1  # native glue between the C++ wait and the Python call is passed over
        last = span[-1]
        op = next((traits[i].op for i in reversed(span) if traits[i].torch_op), None)
        if op is None:
            op = next((traits[i].op for i in reversed(span) if traits[i].op), None)
        if op is None:
            op = frames[first].function
        # the c10d `wrapper` frame is shared by every op: name the op in the position too
        position = (("<collective>", op, None), *keys[last:])
    top_user = next(
        (f for f, t in zip(frames, traits, strict=True) if t.is_user and t.kind != "collective"),
        None,
    )
    top = frames[0] if frames else None
    site_frame = top_user or top
    detail = f"{top.function} ({frame_site(top)})" if top is not None else "(empty stack)"
    return StackInfo(
        frames=frames,
        keys=keys,
        classified=classified,
        kind=kind,
        op=op,
        position=position,
        top_user_frame=top_user,
        top_frame=top,
        site=frame_site(site_frame) if site_frame is not None else None,
        detail=detail,
    )


def _has_native(frames: tuple[Frame, ...]) -> bool:
    return any(frame.native for frame in frames)


class StackTable:
    """Interns stacks: each distinct stack is classified once and named by a small int."""

    def __init__(self) -> None:
        self._ids: dict[tuple[FrameKey, ...], int] = {}
        # Loaders that intern stacks hand the same tuple to many ranks: one id() lookup then.
        # The tuple is kept with its id so that the id cannot be reused by another object.
        self._by_identity: dict[int, tuple[tuple[Frame, ...], int]] = {}
        self.stacks: list[StackInfo] = []

    def add(self, frames: tuple[Frame, ...]) -> int:
        seen = self._by_identity.get(id(frames))
        if seen is not None and seen[0] is frames:
            return seen[1]
        keys = tuple(map(_frame_key, frames) if _has_native(frames) else map(_FRAME_KEY, frames))
        sid = self._ids.get(keys)
        if sid is None:
            sid = len(self.stacks)
            self._ids[keys] = sid
            self.stacks.append(_describe(frames, keys))
        self._by_identity[id(frames)] = (frames, sid)
        return sid

    def __getitem__(self, sid: int) -> StackInfo:
        return self.stacks[sid]

    def __len__(self) -> int:
        return len(self.stacks)


# ---------------------------------------------------------------------------------------------
# ranks over samples


@dataclass(slots=True)
class RankDigest:
    """One identified rank: its main-thread stack in each usable sample, and how it moved."""

    rank: int
    node: str
    proc: Rank
    stack_ids: tuple[int, ...]  # one per sample that yielded a main thread with frames
    sample_errors: int
    active: bool  # main thread reported active in some sample
    busy_threads: tuple[str, ...]  # other threads active in user code
    main_rule: str = "os_thread_id"  # how the main thread was found (MAIN_RULES), weakest used
    cpu_fraction: float | None = None  # main thread's CPU over the samples (cores), measured
    # bytes/s read+written (rchar+wchar) over the samples: the main thread's (see _usage)
    io_rate: float | None = None
    # the same of the whole process, every thread's I/O (see _usage)
    process_io_rate: float | None = None
    # other threads with the job's own code, not idle: (description, site), see _side_threads
    side_threads: tuple[tuple[str, str], ...] = ()
    # the host the node's collector ran on (its hostname, else the node's name): loopback
    # addresses are that host's own
    host: str = ""
    # another thread stuck in a collective: (its name, its stack)
    side_collective: tuple[str, StackInfo] | None = None
    # another thread holding the GIL, idle, in every sample, the main thread idle without it:
    # (its name, its stack)
    gil_holder: tuple[str, StackInfo] | None = None
    stationary: bool = True  # same stack in every sample (trivially so with one sample)
    settled: bool = True  # stationary, or waiting at one collective with the inside moving
    moving_key: tuple[FrameKey, ...] | None = None  # stable prefix + function, outermost first
    class_index: int | None = None

    @property
    def last(self) -> int | None:
        return self.stack_ids[-1] if self.stack_ids else None


@dataclass
class StackMerge:
    """Everything derived from the stacks alone, shared by the verdict rules and the report."""

    table: StackTable
    digests: list[RankDigest]  # identified ranks, sorted by rank
    unidentified: list[tuple[Node, Rank]]
    duplicates: list[tuple[Node, Rank]]
    classes: list[StackClass]
    class_keys: list[tuple[object, ...]]
    tree: TreeNode | None
    max_samples: int = 0
    notes: list[str] = field(default_factory=list)


def _thread_label(thread: ThreadStack) -> str | None:
    user = next((f for f in thread.frames if _frame_traits(f).is_user), None)
    if user is None:
        return None
    return f"{thread.name or thread.thread_id} ({frame_site(user)})"


def _busy_threads(samples: Sequence[Sample], main: ThreadStack | None) -> tuple[str, ...]:
    """Non-main threads seen active with a user frame on top, as ``name (file:line)``."""
    found: dict[str, None] = {}
    for sample in samples:
        for thread in sample.threads:
            if not thread.active or not thread.frames or _same_thread(thread, main):
                continue
            label = _thread_label(thread)
            if label is not None:
                found[label] = None
    return tuple(found)


def _same_thread(thread: ThreadStack, main: ThreadStack | None) -> bool:
    return main is not None and thread.thread_id == main.thread_id


# System calls that move data on a descriptor: a thread sitting in one (blocked_calls) is not
# parked, whatever its frames (a queue's feeder thread writing to a pipe nobody reads).
TRANSFER_CALLS = frozenset({"read", "write", "readv", "writev", "recvfrom", "sendto", "recvmsg",
                            "sendmsg", "recvmmsg", "sendmmsg", "sendfile"})


def _side_threads(sample: Sample, main: ThreadStack | None,
                  calls: Sequence[BlockedCall] = ()) -> tuple[tuple[str, str], ...]:
    """Threads of the last sample other than main that are not idle helpers: the threads the
    main thread may be waiting on (a prefetch or writer thread stuck in the job's own code), as
    (description, site of its innermost frame of the job's code).

    The description says where in the job's code the thread is and, when it is idle below
    that frame, in which call it waits: "prefetch_0 in fetch_manifest (loader.py:62), waiting
    in SocketIO.readinto". Threads that wait on a lock, an event or a queue come last: they
    wait for yet another thread, so a thread blocked in I/O or running is the likelier end
    of the chain (the main thread's wait does not say which thread would wake it).

    A thread without the job's code that sits in a send, receive, read or write (``calls``:
    the rank's blocked_calls) is listed too, after those, at its innermost Python frame: "QueueFeederThread in
    Queue._feed (multiprocessing/queues.py:250), blocked in write on pipe:[4411]"."""
    found: dict[str, tuple[int, int, str]] = {}
    moving = {c.tid: c for c in calls if c.call in TRANSFER_CALLS}
    for order, thread in enumerate(sample.threads):
        if _same_thread(thread, main):
            continue
        python = [f for f in thread.frames if not f.native]
        call = moving.get(thread.os_thread_id) if thread.os_thread_id is not None else None
        at = next((i for i, f in enumerate(python) if _frame_traits(f).is_user), None)
        if at is None and call is not None and python:
            where = call.target or "?"
            if call.local and call.remote:
                where = f"{call.local} -> {call.remote}"
            text = (f"{thread.name or thread.thread_id} in {python[0].function} "
                    f"({frame_site(python[0])}), blocked in {call.call} on {where}")
            found.setdefault(text, (1, order, frame_site(python[0])))
            continue
        if is_idle_thread(thread) or at is None:
            continue
        user = python[at]
        site = frame_site(user)
        name = str(thread.name or thread.thread_id)
        text = f"{name}{'' if user.function == name else ' in ' + user.function} ({site})"
        parked = False
        if at > 0 and not thread.active:
            text += f", waiting in {python[0].function}"
            parked = _frame_traits(python[0]).kind in ("lock", "sleep")
        found.setdefault(text, (2 if parked else 0, order, site))
    ranked = sorted(found.items(), key=lambda item: item[1][:2])
    return tuple((text, site) for text, (_, _, site) in ranked)


def _side_collective(table: StackTable, mains: Sequence[tuple[Sample, ThreadStack]]
                     ) -> tuple[str, StackInfo] | None:
    """A thread other than main stuck in a collective: in one in the last sample, at the same
    place in every sample that shows it, and (when its CPU time was read in two samples) not
    run since the first: (its name, its stack). The main thread may be waiting for it (a join,
    a future, a queue): an asynchronous checkpoint writer in its barrier. A thread that only
    passes through collectives (a metrics loop) runs between the samples."""
    last, main = mains[-1]
    for thread in last.threads:
        if _same_thread(thread, main) or not thread.frames:
            continue
        info = table[table.add(thread.frames)]
        if info.kind != "collective":
            continue
        seen = [t for sample, m in mains for t in sample.threads
                if t.thread_id == thread.thread_id and not _same_thread(t, m)]
        if any(not t.frames or table[table.add(t.frames)].position != info.position
               for t in seen):
            continue
        times = [t.cpu_s for t in seen if t.cpu_s is not None]
        if len(times) >= 2 and times[-1] - times[0] > CPU_TICK_S:
            continue
        return str(thread.name or thread.thread_id), info
    return None


def _gil_holder(table: StackTable, mains: Sequence[tuple[Sample, ThreadStack]],
                proc: Rank | None = None) -> tuple[str, StackInfo] | None:
    """A thread other than main that holds the GIL while idle (blocked in a call that kept
    it: a C extension without Py_BEGIN_ALLOW_THREADS, ctypes.PyDLL) in every sample, at the
    same stack and (when its CPU time was read twice) not run since the first, while the main
    thread holds it in none and did no work (idle in every sample; or its CPU time over the
    samples under 2 % of a core, 5 % when the kernel shows it asleep on a futex, the GIL's: a
    thread waiting for the GIL wakes each switch interval to ask for it, 2-3 % of a core on a
    loaded node, and py-spy may catch it running; gil_held_native): (its name, its stack).
    That main thread stopped at its next switch of the GIL, wherever it was: its own line
    says nothing of the cause."""
    last, main = mains[-1]
    if any(m.owns_gil for _, m in mains):
        return None
    asleep = proc is not None and _asleep_on_a_futex(proc)
    if any(m.active for _, m in mains) and not _waited_for_the_gil(
            mains, GIL_WAIT_CPU_ASLEEP if asleep else GIL_WAIT_CPU):
        return None
    holder = next((t for t in last.threads if t.owns_gil and not t.active and t.frames
                   and not _same_thread(t, main)), None)
    if holder is None:
        return None
    sid = table.add(holder.frames)
    seen = [t for sample, _ in mains for t in sample.threads if t.thread_id == holder.thread_id]
    if len(seen) != len(mains) or any(
            not t.owns_gil or t.active or not t.frames or table.add(t.frames) != sid
            for t in seen):
        return None
    times = [t.cpu_s for t in seen if t.cpu_s is not None]
    if len(times) >= 2 and times[-1] - times[0] > CPU_TICK_S:
        return None
    return str(holder.name or holder.thread_id), table[sid]


CPU_TICK_S = 0.01  # the resolution of the collector's CPU times (USER_HZ 100)
GIL_WAIT_CPU = 0.02  # a main thread asking for the GIL uses less than this share of a core
GIL_WAIT_CPU_ASLEEP = 0.05  # ... and less than this when the kernel shows it asleep on a futex


def _asleep_on_a_futex(proc: Rank) -> bool:
    """The kernel shows the process's main thread asleep (state S) on a futex (its wchan), as
    a thread waiting for the GIL is between its wake-ups; a thread computing is running."""
    return (proc.state or "")[:1] == "S" and "futex" in (proc.wchan or "")


def _waited_for_the_gil(mains: Sequence[tuple[Sample, ThreadStack]],
                        bar: float = GIL_WAIT_CPU) -> bool:
    """The main thread's CPU time, read in two samples at least, grew by less than ``bar`` of
    a core (one clock tick forgiven): it did no work between them."""
    measured = [(s.t, m.cpu_s) for s, m in mains if m.cpu_s is not None]
    if len(measured) < 2 or measured[-1][0] - measured[0][0] < 0.5:
        return False
    used = measured[-1][1] - measured[0][1] - CPU_TICK_S
    return used / (measured[-1][0] - measured[0][0]) < bar


# Where a main thread waits for another thread's signal (a future, an event, a join, a queue):
# its innermost Python frame is in one of these files (a Lock's acquire is C: the frame on top
# is the caller's own line, and it may be the main thread itself that holds the lock).
THREAD_SIGNAL_FILES = ("threading.py", "queue.py", "concurrent/futures/_base.py")


def waits_for_a_signal(frames: Sequence[Frame]) -> bool:
    """The innermost Python frame is a thread-to-thread wait (THREAD_SIGNAL_FILES)."""
    top = next((f for f in frames if not f.native), None)
    return top is not None and top.file.endswith(THREAD_SIGNAL_FILES)


def _usage(samples: Sequence[Sample], mains: Sequence[tuple[Sample, ThreadStack]]):  # type: ignore[no-untyped-def]
    """(main thread's CPU in cores, I/O bytes/s) between the first and last measured sample.

    The I/O is the main thread's own (its /proc/PID/task/PID/io, every sample having it), unless
    it waits for another thread's signal (a future, a join, a queue: the other thread's work is
    the rank's progress then) or the collector did not read it: then the process's. A main
    thread stuck in a lock or a socket while another thread writes a trace file at megabytes a
    second does not work (lock_hang_busy_writer). Third: the whole process's I/O, always."""
    measured = [(s.t, m.cpu_s) for s, m in mains if m.cpu_s is not None]
    cpu = None
    if len(measured) >= 2 and measured[-1][0] - measured[0][0] > 0.05:
        # CPU times come in clock ticks (10 ms): one tick over a short window (0.5 s: 2 %) is a
        # wait loop's wake-up as much as work, so the fraction is counted one tick short
        used = measured[-1][1] - measured[0][1] - CPU_TICK_S
        cpu = max(0.0, used / (measured[-1][0] - measured[0][0]))
    process = _io_rate([(s.t, s.io) for s in samples if s.io is not None])
    counted = [(s.t, s.main_io) for s in samples if s.main_io is not None]
    if len(counted) < len(samples) or (mains and waits_for_a_signal(mains[-1][1].frames)):
        return cpu, process, process
    return cpu, _io_rate(counted), process


def _io_rate(counted: Sequence[tuple[float, tuple[int, ...]]]) -> float | None:
    """Bytes/s read and written (rchar + wchar) between the first and last counters."""
    if len(counted) < 2 or counted[-1][0] - counted[0][0] <= 0.05:
        return None
    (t0, a), (t1, b) = counted[0], counted[-1]
    return max(0.0, ((b[0] - a[0]) + (b[1] - a[1])) / (t1 - t0))


def _digest(table: StackTable, node: Node, proc: Rank, rank: int) -> RankDigest:
    stack_ids: list[int] = []
    errors = 0
    active = False
    main: ThreadStack | None = None
    rules: set[str] = set()
    mains: list[tuple[Sample, ThreadStack]] = []
    last_sample: Sample | None = None
    add = table.add
    for sample in proc.samples:
        if sample.error is not None and not sample.threads:
            errors += 1
            continue
        main, rule = pick_main_thread(sample, proc.pid)
        if main is None or not main.frames:
            errors += 1
            continue
        rules.add(rule)
        mains.append((sample, main))
        last_sample = sample
        stack_ids.append(add(main.frames))
        active = active or main.active
    multi = any(len(s.threads) > 1 for s in proc.samples)
    busy = _busy_threads(proc.samples, main) if multi else ()
    side = (_side_threads(last_sample, main, proc.blocked_calls)
            if multi and last_sample is not None else ())
    waits = _side_collective(table, mains) if multi and mains else None
    holder = _gil_holder(table, mains, proc) if multi and mains else None
    cpu, io, process_io = _usage(proc.samples, mains)
    return RankDigest(
        rank=rank,
        node=node.name,
        proc=proc,
        stack_ids=tuple(stack_ids),
        sample_errors=errors,
        active=active,
        busy_threads=busy,
        main_rule=max(rules, key=MAIN_RULES.index) if rules else "os_thread_id",
        cpu_fraction=cpu,
        io_rate=io,
        process_io_rate=process_io,
        side_threads=side,
        side_collective=waits,
        gil_holder=holder,
        host=node.hostname or node.name,
    )


def _moving_key(table: StackTable, stack_ids: Iterable[int]) -> tuple[FrameKey, ...]:
    """Common outermost prefix of the stacks, plus (file, function) where they first differ.

    A stack torn by py-spy reading a running process (its outer frames missing: seen as
    `[Random.choice, <genexpr>]` between two whole stacks of a rank at 100% CPU) is not rooted
    where the others are: the stacks whose outermost frame most of them share decide."""
    stacks = [table[sid].keys[::-1] for sid in dict.fromkeys(stack_ids)]
    outermost = Counter(s[0] for s in stacks if s)
    if len(outermost) > 1:
        common = outermost.most_common(1)[0][0]
        stacks = [s for s in stacks if s and s[0] == common]
    shortest = min(len(s) for s in stacks)
    depth = 0
    while depth < shortest and all(s[depth] == stacks[0][depth] for s in stacks):
        depth += 1
    key = stacks[0][:depth]
    if depth < shortest:
        file, function = stacks[0][depth][0], stacks[0][depth][1]
        if all(s[depth][0] == file and s[depth][1] == function for s in stacks):
            key = key + ((file, function, None),)
    return key


def _settle(table: StackTable, digest: RankDigest, memo: dict[tuple[int, ...], tuple]) -> None:
    distinct = tuple(sorted(set(digest.stack_ids)))
    if len(distinct) <= 1:
        return
    digest.stationary = False
    cached = memo.get(distinct)
    if cached is None:
        infos = [table[sid] for sid in distinct]
        settled = all(i.position is not None for i in infos) and (
            len({i.position for i in infos}) == 1
        )
        cached = (settled, _moving_key(table, distinct))
        memo[distinct] = cached
    digest.settled, digest.moving_key = cached


# ---------------------------------------------------------------------------------------------
# classes and tree


def _frame_from_key(key: FrameKey) -> Frame:
    return Frame(function=key[1], file=key[0], line=key[2])


def _build_classes(
    table: StackTable, digests: list[RankDigest]
) -> tuple[list[StackClass], list[tuple[object, ...]]]:
    members: dict[tuple[object, ...], list[int]] = {}
    sample_of: dict[tuple[object, ...], RankDigest] = {}
    for d in digests:
        if d.last is None:
            continue
        key: tuple[object, ...]
        if d.stationary:
            key = ("stationary", d.last)
        else:
            key = ("moving", d.moving_key)
        members.setdefault(key, []).append(d.rank)
        sample_of.setdefault(key, d)
    order = sorted(members, key=lambda k: (-len(members[k]), members[k][0]))
    classes = []
    for key in order:
        ranks = tuple(members[key])
        rep = sample_of[key]
        info = table[rep.last] if rep.last is not None else None
        if key[0] == "stationary" and info is not None:
            classes.append(
                StackClass(
                    ranks=ranks,
                    frames=info.classified,
                    kind=info.kind,
                    top_user_frame=info.top_user_frame,
                    top_frame=info.top_frame,
                    stationary=True,
                    label=format_int_ranges(ranks),
                    site=info.site,
                    op=info.op,
                )
            )
            continue
        frames = tuple(_frame_from_key(k) for k in reversed(rep.moving_key or ()))
        classified = tuple(classify_frame(f) for f in frames)
        top_user = next((c.frame for c in classified if c.is_user and c.kind != "collective"), None)
        site_frame = top_user or (frames[0] if frames else None)
        classes.append(
            StackClass(
                ranks=ranks,
                frames=classified,
                kind=info.kind if info is not None else "user",
                top_user_frame=top_user,
                top_frame=frames[0] if frames else None,
                stationary=False,
                label=format_int_ranges(ranks),
                site=function_site(site_frame) if site_frame is not None else None,
                op=info.op if info is not None and rep.settled else None,
            )
        )
    return classes, order


class _Trie:
    __slots__ = ("children", "frame", "is_user", "kind", "ranks")

    def __init__(self, frame: ClassifiedFrame | None) -> None:
        self.frame = frame
        self.children: dict[FrameKey, _Trie] = {}
        self.ranks: set[int] = set()


def _freeze(trie: _Trie) -> TreeNode:
    children = sorted(
        (_freeze(child) for child in trie.children.values()),
        key=lambda n: (-len(n.ranks), n.ranks[0] if n.ranks else -1),
    )
    cf = trie.frame
    return TreeNode(
        frame=cf.frame if cf is not None else None,
        ranks=tuple(sorted(trie.ranks)),
        children=tuple(children),
        is_user=cf.is_user if cf is not None else False,
        kind=cf.kind if cf is not None else "library",
    )


def _build_tree(table: StackTable, digests: list[RankDigest]) -> TreeNode | None:
    """STAT's 3D tree: every stack a rank showed in any sample, outermost frame at the root."""
    ranks_of: dict[int, set[int]] = {}
    for d in digests:
        for sid in set(d.stack_ids):
            ranks_of.setdefault(sid, set()).add(d.rank)
    if not ranks_of:
        return None
    root = _Trie(None)
    for sid in sorted(ranks_of):
        ranks = ranks_of[sid]
        info = table[sid]
        root.ranks |= ranks
        node = root
        for key, cf in zip(reversed(info.keys), reversed(info.classified), strict=True):
            child = node.children.get(key)
            if child is None:
                child = _Trie(cf)
                node.children[key] = child
            child.ranks |= ranks
            node = child
    return _freeze(root)


def merge_stacks(snapshot: Snapshot) -> StackMerge:
    """Digest every rank's samples, then build the equivalence classes and the prefix tree."""
    table = StackTable()
    by_rank: dict[int, RankDigest] = {}
    unidentified: list[tuple[Node, Rank]] = []
    duplicates: list[tuple[Node, Rank]] = []
    max_samples = 0
    for node in snapshot.nodes:
        for proc in node.ranks:
            if proc.rank is None:
                unidentified.append((node, proc))
                continue
            if not proc.samples:
                digest = RankDigest(proc.rank, node.name, proc, (), 0, False, (),
                                    host=node.hostname or node.name)
            else:
                digest = _digest(table, node, proc, proc.rank)
            # the moments of the look: a sample taken again as a rank's wait changed is none
            max_samples = max(max_samples, len(digest.stack_ids)
                              - sum(1 for sample in proc.samples if sample.again and sample.threads))
            previous = by_rank.get(proc.rank)
            if previous is None:
                by_rank[proc.rank] = digest
            elif not previous.stack_ids and digest.stack_ids:
                # keep the copy we can read; two processes claiming one rank is worth a note
                duplicates.append((snapshot_node(snapshot, previous.node), previous.proc))
                by_rank[proc.rank] = digest
            else:
                duplicates.append((node, proc))
    digests = [by_rank[r] for r in sorted(by_rank)]
    memo: dict[tuple[int, ...], tuple] = {}
    for d in digests:
        if len(d.stack_ids) > 1:
            _settle(table, d, memo)
    classes, keys = _build_classes(table, digests)
    index_of = {key: i for i, key in enumerate(keys)}
    for d in digests:
        if d.last is None:
            continue
        key = ("stationary", d.last) if d.stationary else ("moving", d.moving_key)
        d.class_index = index_of[key]
    return StackMerge(
        table=table,
        digests=digests,
        unidentified=unidentified,
        duplicates=duplicates,
        classes=classes,
        class_keys=keys,
        tree=_build_tree(table, digests),
        max_samples=max_samples,
    )


def snapshot_node(snapshot: Snapshot, name: str) -> Node:
    for node in snapshot.nodes:
        if node.name == name:
            return node
    return Node(name=name, status=NodeStatus.OK)

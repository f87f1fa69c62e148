"""Frame kinds, user vs library files, main-thread choice, classes and the prefix tree."""

from __future__ import annotations

import pytest
from snapfactory import (
    C10D,
    SITE,
    TRAIN,
    collective,
    dataloader_wait,
    in_user,
    job,
    node,
    rank,
    snap,
    spinning_in,
    stack,
    thread,
)

from slurmdiag.analysis.stacks import (
    StackTable,
    classify_frame,
    format_int_ranges,
    is_user_file,
    main_thread,
    merge_stacks,
)
from slurmdiag.snapshot import Frame, Sample


@pytest.mark.parametrize(
    ("path", "user"),
    [
        ("/home/alice/proj/train.py", True),
        ("train.py", True),
        ("pretrain_gpt.py", True),
        ("megatron/training.py", True),  # Megatron-LM checkouts are the user's code
        ("test.py", True),
        (f"{SITE}/torch/distributed/distributed_c10d.py", False),
        ("/usr/lib/python3/dist-packages/numpy/core/numeric.py", False),
        ("/usr/lib/python3.11/threading.py", False),
        ("/root/.pyenv/versions/3.11.7/lib/python3.11/queue.py", False),
        ("/opt/conda/lib/python3.10/selectors.py", False),
        ("/src/pytorch/torch/distributed/distributed_c10d.py", False),  # editable install
        ("torch/distributed/distributed_c10d.py", False),  # py-spy short names
        ("deepspeed/runtime/pipe/engine.py", False),
        ("threading.py", False),
        ("multiprocessing/queues.py", False),
        ("<frozen importlib._bootstrap>", False),
        ("<string>", True),
        ("", False),
    ],
)
def test_user_vs_library_files(path: str, user: bool) -> None:
    assert is_user_file(path) is user


@pytest.mark.parametrize(
    ("function", "file", "native", "kind"),
    [
        ("all_reduce", C10D, False, "collective"),
        ("barrier", "torch/distributed/distributed_c10d.py", False, "collective"),
        ("all_gather_into_tensor", C10D, False, "collective"),
        ("_all_gather_base", C10D, False, "collective"),
        ("reduce_scatter_tensor", C10D, False, "collective"),
        ("broadcast_object_list", C10D, False, "collective"),
        ("monitored_barrier", C10D, False, "collective"),
        ("wrapper", f"{SITE}/torch/distributed/c10d_logger.py", False, "collective"),
        (
            "wrapper",
            f"{SITE}/torch/distributed/elastic/multiprocessing/errors/__init__.py",
            False,
            "library",
        ),
        ("all_reduce", f"{SITE}/deepspeed/comm/comm.py", False, "collective"),
        ("log_wrapper", f"{SITE}/deepspeed/comm/comm.py", False, "collective"),
        (
            "all_gather_coalesced",
            "deepspeed/runtime/zero/partition_parameters.py",
            False,
            "collective",
        ),
        ("recv", "deepspeed/runtime/pipe/p2p.py", False, "collective"),
        (
            "_all_gather_flat_param",
            f"{SITE}/torch/distributed/fsdp/_flat_param.py",
            False,
            "collective",
        ),
        (
            "_reduce",
            "/work/Megatron-LM/megatron/core/tensor_parallel/mappings.py",
            False,
            "collective",
        ),
        ("wait_for_everyone", f"{SITE}/accelerate/accelerator.py", False, "collective"),
        ("ncclAllReduce", "libnccl.so.2", True, "collective"),
        ("gloo::transport::tcp::UnboundBuffer::waitRecv", "libtorch_cpu.so", True, "collective"),
        ("__next__", "torch/utils/data/dataloader.py", False, "data_loading"),
        (
            "_MultiProcessingDataLoaderIter._next_data",
            "torch/utils/data/dataloader.py",
            False,
            "data_loading",
        ),
        ("get", "queue.py", False, "data_loading"),
        ("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", False, "data_loading"),
        ("wait", "threading.py", False, "lock"),
        ("Condition.wait", "threading.py", False, "lock"),
        ("recv_into", "/usr/lib/python3.11/socket.py", False, "io"),
        ("select", "/usr/lib/python3.11/selectors.py", False, "io"),
        ("save", f"{SITE}/torch/serialization.py", False, "io"),
        ("clock_nanosleep", "libc.so.6", True, "sleep"),
        ("__GI___poll", "libc.so.6", True, "io"),
        ("PyThread_acquire_lock_timed", "libpython3.11.so.1.0", True, "lock"),
        ("0x7f4326ea3f16", "libc.so.6", True, "native"),
        ("forward", f"{SITE}/torch/nn/modules/linear.py", False, "library"),
        ("train_step", TRAIN, False, "user"),
    ],
)
def test_frame_kinds(function: str, file: str, native: bool, kind: str) -> None:
    classified = classify_frame(Frame(function=function, file=file, line=1, native=native))
    assert classified.kind == kind


def test_stack_kind_uses_the_strongest_kind_below_the_first_user_frame() -> None:
    table = StackTable()
    loading = table[table.add(dataloader_wait(44))]
    assert loading.kind == "data_loading"  # not "lock", though threading.wait is innermost
    assert loading.site == f"{TRAIN}:44"
    waiting = table[table.add(collective("all_reduce", 50))]
    assert (waiting.kind, waiting.op, waiting.site) == ("collective", "all_reduce", f"{TRAIN}:50")
    own = table[table.add(in_user(70))]
    assert (own.kind, own.site) == ("user", f"{TRAIN}:70")


def test_object_collective_is_named_by_the_api_the_user_called() -> None:
    frames = stack(
        f"all_gather {C10D}:3000",
        f"wrapper {SITE}/torch/distributed/c10d_logger.py:83",
        f"all_gather_object {C10D}:2400",
        f"wrapper {SITE}/torch/distributed/c10d_logger.py:83",
        f"log_metrics {TRAIN}:120",
    )
    table = StackTable()
    info = table[table.add(frames)]
    assert info.op == "all_gather_object"
    assert info.site == f"{TRAIN}:120"


def test_main_thread_is_the_one_named_main_else_the_first_with_frames() -> None:
    worker = thread(in_user(5), name="pin_memory", thread_id=2)
    main = thread(collective("barrier"), name="MainThread", thread_id=1)
    assert main_thread(Sample(t=0, threads=(worker, main))) is main
    empty = thread((), name="Dummy-1", thread_id=3)
    assert main_thread(Sample(t=0, threads=(empty, worker))) is worker
    assert main_thread(Sample(t=0)) is None


def test_equivalence_classes_compare_every_frame_and_label_compactly() -> None:
    s = job(2, 4, lambda r: [collective("barrier", 53) if r == 5 else collective("all_reduce")] * 3)
    merge = merge_stacks(s)
    assert [c.label for c in merge.classes] == ["0-4,6-7", "5"]
    assert merge.classes[0].stationary and merge.classes[0].op == "all_reduce"
    assert merge.classes[1].site == f"{TRAIN}:53"
    assert [d.class_index for d in merge.digests] == [0, 0, 0, 0, 0, 1, 0, 0]
    assert format_int_ranges([0, 1, 2, 3, 4, 5, 6, 8, 10, 11, 12, 13, 14, 15]) == "0-6,8,10-15"


def test_moving_ranks_are_grouped_by_stable_prefix_and_function() -> None:
    def stacks(r: int) -> list:
        if r in (2, 3):  # two ranks spinning in busy_loop, at different lines each sample
            return [spinning_in("busy_loop", 20 + (r + i) % 3) for i in range(3)]
        return [collective("all_reduce")] * 3

    merge = merge_stacks(job(1, 4, stacks))
    moving = [c for c in merge.classes if not c.stationary]
    assert len(moving) == 1
    assert moving[0].ranks == (2, 3)
    assert moving[0].site == f"{TRAIN}:busy_loop"
    assert moving[0].top_user_frame is not None
    assert moving[0].top_user_frame.function == "busy_loop"
    assert all(not d.stationary for d in merge.digests if d.rank in (2, 3))


def test_a_rank_moving_inside_a_collective_is_settled() -> None:
    inner_a = stack(
        f"_store_based_barrier {C10D}:400",
        f"new_group {C10D}:900",
        f"setup {TRAIN}:10",
        f"<module> {TRAIN}:90",
    )
    inner_b = stack(
        f"_store_based_barrier {C10D}:407",
        f"new_group {C10D}:900",
        f"setup {TRAIN}:10",
        f"<module> {TRAIN}:90",
    )
    merge = merge_stacks(snap(node("n1", rank(0, inner_a, inner_b, inner_a, world=1))))
    digest = merge.digests[0]
    assert not digest.stationary and digest.settled


def test_prefix_tree_counts_ranks_per_frame_outermost_first() -> None:
    s = job(1, 4, lambda r: [collective("barrier", 53) if r == 0 else collective("all_reduce")])
    tree = merge_stacks(s).tree
    assert tree is not None and tree.frame is None and tree.ranks == (0, 1, 2, 3)
    (module,) = tree.children
    assert module.frame is not None and module.frame.function == "<module>" and module.is_user
    (main,) = module.children
    assert main.ranks == (0, 1, 2, 3)


def test_prefix_tree_splits_at_the_divergent_line() -> None:
    s = job(1, 4, lambda r: [collective("barrier", 53) if r == 0 else collective("all_reduce")])
    tree = merge_stacks(s).tree
    assert tree is not None
    node_ = tree
    while len(node_.children) == 1:
        node_ = node_.children[0]
    split = sorted((c.ranks, c.frame.line if c.frame else None) for c in node_.children)
    assert split == [((0,), 53), ((1, 2, 3), 50)]
    assert node_.frame is not None and node_.frame.function == "main"


def test_unidentified_and_duplicate_ranks_are_set_aside() -> None:
    s = snap(
        node("n1", rank(0, collective("all_reduce")), rank(None, in_user(5), pid=77)),
        node("n2", rank(1, collective("all_reduce")), rank(1, collective("all_reduce"), pid=78)),
    )
    merge = merge_stacks(s)
    assert [d.rank for d in merge.digests] == [0, 1]
    assert [p.pid for _, p in merge.unidentified] == [77]
    assert [p.pid for _, p in merge.duplicates] == [78]


def test_busy_threads_other_than_main_are_noted() -> None:
    spinner = thread(in_user(33, fn="poll_metrics"), name="metrics", active=True, thread_id=9)
    s = snap(node("n1", rank(0, collective("all_reduce"), extra_threads=[spinner], world=1)))
    digest = merge_stacks(s).digests[0]
    assert digest.busy_threads == (f"metrics ({TRAIN}:33)",)


def test_native_frames_at_different_addresses_still_form_one_class() -> None:
    # GIVEN --native stacks (shape as py-spy 0.4 prints them for a hung gloo rank): unresolved
    # libc frames are addresses that differ per process (ASLR), C++ and pybind11 glue sits
    # between the wait and the Python all_reduce
    from snapfactory import C10D, C10D_LOGGER, loop, node, rank, snap, stack

    from slurmdiag.analysis import analyze

    def native_wait(address: str, op: str = "all_reduce", line: int = 50):
        return stack(
            f"{address} /usr/lib/x86_64-linux-gnu/libc.so.6",
            "pthread_cond_wait /usr/lib/x86_64-linux-gnu/libc.so.6",
            "c10d::Work::wait /opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so",
            "pybind11::cpp_function::dispatcher /opt/venv/lib/python3.11/site-packages/torch/lib/libtorch_python.so",
            f"{op} {C10D}:3252", f"wrapper {C10D_LOGGER}:83", *loop(line),
        )

    ranks = [rank(r, native_wait(f"0x7f{r}a3f16"), native_wait(f"0x7f{r}a3f16")) for r in (0, 2, 3)]
    odd = rank(1, native_wait("0x7f1b0001", "all_gather", 44), native_wait("0x7f1b0001", "all_gather", 44))
    analysis = analyze(snap(node("n1", ranks[0], odd), node("n2", *ranks[1:])))
    # THEN ranks 0, 2, 3 share one class, the op comes from the Python frame, rank 1 is the culprit
    assert sorted(c.label for c in analysis.classes) == ["0,2-3", "1"]
    assert {c.op for c in analysis.classes} == {"all_reduce", "all_gather"}
    verdict = analysis.verdicts[0]
    assert verdict.kind == "mismatched_collective" and verdict.culprit_ranks == (1,)

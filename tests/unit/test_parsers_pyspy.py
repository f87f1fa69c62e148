"""Tests of slurmdiag.parsers.pyspy on real py-spy dumps (tests/fixtures/py_spy/).

``local_pyspy0.4_*`` files were captured here from tests/fixtures/py_spy/local_blocked_program.py
(see tests/fixtures/LOCAL_SOURCES.md); the others are public pastes listed in the shared
SOURCES.md. Inputs written by hand are marked SYNTHETIC.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.pyspy_text import ProcessDump, parse_pyspy_text

from slurmdiag.errors import ParseError
from slurmdiag.parsers.pyspy import parse_pyspy_json
from slurmdiag.snapshot import Frame

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "py_spy"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- JSON ------------------------------------------------------------------------------------


def test_json_dump_of_a_blocked_program_gives_both_threads_innermost_first() -> None:
    # GIVEN a real `py-spy dump --json` of a program whose main thread waits on an Event
    text = read("local_pyspy0.4_json_blocked.json")
    # WHEN it is parsed
    threads = parse_pyspy_json(text)
    # THEN both threads are there with their ids and states
    by_name = {t.name: t for t in threads}
    assert set(by_name) == {"MainThread", "heartbeat"}
    main = by_name["MainThread"]
    assert main.thread_id == 139926400744320
    assert main.os_thread_id == 9877
    assert main.active is False and main.owns_gil is False
    # AND frames are innermost first, Python frames with file, line and no module
    assert [f.function for f in main.frames] == [
        "Condition.wait",
        "Event.wait",
        "wait_for_peer",
        "main",
        "<module>",
    ]
    assert main.frames[2] == Frame(
        function="wait_for_peer",
        file="/tmp/slurmdiag_pyspy/blocked_rank.py",
        line=12,
        module=None,
        native=False,
    )
    assert by_name["heartbeat"].os_thread_id == 9878
    assert by_name["heartbeat"].frames[0].function == "heartbeat"
    assert by_name["heartbeat"].frames[0].line == 17


def test_json_native_frames_are_marked_native_and_lose_line_zero() -> None:
    # GIVEN a real `py-spy dump --native --json` (native frames carry line 0 and a .so module)
    threads = parse_pyspy_json(read("local_pyspy0.4_json_native_blocked.json"))
    main = next(t for t in threads if t.name == "MainThread")
    # WHEN looking at the innermost frames
    first, third = main.frames[0], main.frames[2]
    # THEN addresses and C functions are native, without a line
    assert first.function == "0x7fc5b1ca3f16" and first.native and first.line is None
    assert third.function == "PyThread_acquire_lock_timed"
    assert third.native is True
    assert third.module is not None and third.module.endswith("libpython3.11.so.1.0")
    # AND the Python frames between them are not native
    python_frames = [f for f in main.frames if not f.native]
    assert [f.function for f in python_frames] == [
        "Condition.wait",
        "Event.wait",
        "wait_for_peer",
        "main",
        "<module>",
    ]


def test_json_accepts_already_loaded_and_slimmed_objects() -> None:
    # GIVEN the real dump loaded as objects, with locals and short_filename removed (slimmed)
    data = json.loads(read("local_pyspy0.4_json_blocked.json"))
    for thread in data:
        for frame in thread["frames"]:
            del frame["locals"], frame["short_filename"]
    # WHEN the list itself and its re-serialised text are parsed
    from_obj = parse_pyspy_json(data)
    from_text = parse_pyspy_json(json.dumps(data))
    # THEN both give the same stacks as the full dump
    assert from_obj == from_text == parse_pyspy_json(read("local_pyspy0.4_json_blocked.json"))


def test_json_truncated_keeps_the_complete_threads() -> None:
    # GIVEN the real dump cut in the middle of its second thread object
    text = read("local_pyspy0.4_json_blocked.json")
    cut = text.index('"thread_name": "MainThread"')
    # WHEN the truncated text is parsed
    threads = parse_pyspy_json(text[:cut])
    # THEN the first, complete thread is returned
    assert [t.name for t in threads] == ["heartbeat"]


def test_json_that_is_not_a_thread_list_is_rejected() -> None:
    # GIVEN a JSON document of another tool (the ip -j fixture)
    other = (FIXTURES.parent / "net_ib" / "ip_j_link_ib_8x_ibpNNs0.json").read_text()
    # WHEN / THEN it raises ParseError
    with pytest.raises(ParseError):
        parse_pyspy_json(other)
    with pytest.raises(ParseError):
        parse_pyspy_json("Error: Failed to find python version from target process")


# --- text ------------------------------------------------------------------------------------


def test_text_dump_has_process_header_command_and_threads() -> None:
    # GIVEN a real plain `py-spy dump` of the blocked program
    dumps = parse_pyspy_text(read("local_pyspy0.4_text_blocked.txt"))
    # THEN there is one process with its pid and command
    assert len(dumps) == 1
    dump = dumps[0]
    assert dump.pid == 9877
    assert dump.command == "/work/main/.venv/bin/python blocked_rank.py"
    # AND decimal thread ids are OS thread ids
    main, heartbeat = dump.threads
    assert (main.name, main.thread_id, main.os_thread_id, main.active) == (
        "MainThread",
        9877,
        9877,
        False,
    )
    assert main.frames[2] == Frame(function="wait_for_peer", file="blocked_rank.py", line=12)
    assert [f.function for f in heartbeat.frames] == [
        "heartbeat",
        "Thread.run",
        "Thread._bootstrap_inner",
        "Thread._bootstrap",
    ]


def test_text_locals_are_skipped_and_native_frames_marked() -> None:
    # GIVEN real `--locals` and `--native` text dumps of the same process
    plain = parse_pyspy_text(read("local_pyspy0.4_text_blocked.txt"))
    with_locals = parse_pyspy_text(read("local_pyspy0.4_text_locals_blocked.txt"))
    native = parse_pyspy_text(read("local_pyspy0.4_text_native_blocked.txt"))
    # THEN the locals dump has exactly the plain stacks
    assert with_locals == plain
    # AND the native dump adds native frames: "0x..." addresses and "symbol (lib.so)"
    main = native[0].threads[0]
    assert main.frames[0] == Frame(function="0x7f4326ea3f16", file="libc.so.6", native=True)
    assert main.frames[2] == Frame(
        function="PyThread_acquire_lock_timed", file="libpython3.11.so.1.0", native=True
    )
    assert [f.function for f in main.frames if not f.native] == [
        f.function for f in plain[0].threads[0].frames
    ]


def test_text_merged_headers_share_one_stack() -> None:
    # GIVEN a pasted dump where four identical stacks were merged under four headers
    dumps = parse_pyspy_text(read("bigscience_tr11_node48_4procs_broadcast_aggregated.txt"))
    # THEN one headerless process holds four threads with the same ten frames
    assert [(d.pid, d.command) for d in dumps] == [(None, None)]
    threads = dumps[0].threads
    assert [t.thread_id for t in threads] == [688510, 688511, 599212, 599213]
    assert all(t.active and t.name == "MainThread" for t in threads)
    assert len({t.frames for t in threads}) == 1
    top = threads[0].frames[0]
    assert top == Frame(
        function="broadcast", file="torch/distributed/distributed_c10d.py", line=1191
    )
    assert threads[0].frames[-1].function == "<module>"
    assert len(threads[0].frames) == 10


@pytest.mark.parametrize(
    ("name", "thread_ids", "top", "depth"),
    [
        (
            "bigscience_tr11_node48_3procs_broadcast_aggregated.txt",
            [688515, 688516, 688517],
            "broadcast",
            15,
        ),
        (
            "bigscience_tr11_node49_4procs_all_reduce_aggregated.txt",
            [686181, 686182, 686183, 686184],
            "all_reduce",
            10,
        ),
        (
            "bigscience_tr11_node49_4procs_recv_aggregated.txt",
            [686185, 686186, 686187, 686188],
            "recv",
            12,
        ),
    ],
)
def test_text_other_aggregated_pastes(
    name: str, thread_ids: list[int], top: str, depth: int
) -> None:
    # GIVEN other real aggregated pastes of the same hang
    (dump,) = parse_pyspy_text(read(name))
    # THEN each header got the shared stack
    assert [t.thread_id for t in dump.threads] == thread_ids
    assert {t.frames[0].function for t in dump.threads} == {top}
    assert {len(t.frames) for t in dump.threads} == {depth}


def test_text_idle_thread_is_not_active() -> None:
    # GIVEN the culprit rank of the hang: the data loader waits on a queue
    (dump,) = parse_pyspy_text(read("bigscience_tr11_node48_dataloader_idle.txt"))
    (thread,) = dump.threads
    # THEN it is idle, in threading.wait under queue.get
    assert thread.thread_id == 688514 and thread.active is False and thread.owns_gil is False
    assert [f.function for f in thread.frames[:3]] == ["wait", "get", "_try_get_data"]
    assert thread.frames[0] == Frame(function="wait", file="threading.py", line=306)
    assert len(thread.frames) == 17


def test_text_prose_between_stacks_is_skipped() -> None:
    # GIVEN an annotated paste: "6 processes are in:" / "2 processes are in:" between stacks
    (dump,) = parse_pyspy_text(read("bigscience_hangdebug_train_vs_broadcast_annotated.txt"))
    # THEN the two stacks are read and the prose is not taken as frames
    first, second = dump.threads
    assert first.thread_id == 835990
    assert [f.function for f in first.frames] == ["train", "pretrain", "<module>"]
    assert second.thread_id == 835995
    assert second.frames[0].function == "broadcast"
    assert second.frames[-1] == Frame(function="<module>", file="pretrain_gpt.py", line=239)
    assert len(second.frames) == 7


def test_text_partial_paste_keeps_dunder_names() -> None:
    # GIVEN a paste cut by the excerpt window, with dunder and dynamo frames
    (dump,) = parse_pyspy_text(
        read("issue_accelerate3104_deepspeed_all_gather_coalesced_PARTIAL.txt")
    )
    (thread,) = dump.threads
    # THEN every complete frame line is there
    assert thread.thread_id == 3295
    assert len(thread.frames) == 21
    assert thread.frames[0].function == "all_gather_coalesced"
    assert thread.frames[2] == Frame(
        function="__all_gather_params_",
        file="deepspeed/runtime/zero/partitioned_param_coordinator.py",
        line=464,
    )
    assert thread.frames[8].file == "torch/_dynamo/eval_frame.py"


def test_gdb_backtrace_is_not_a_pyspy_dump() -> None:
    # GIVEN a gdb 'thread apply all bt' (its "Thread 58 (Thread 0x... (LWP n)):" lines differ)
    text = read("gdb_bt_NOT_pyspy_nccl829_ncclCommAbort_cudaStreamSynchronize_PARTIAL.txt")
    # WHEN / THEN it is rejected instead of being read as threads
    with pytest.raises(ParseError):
        parse_pyspy_text(text)


def test_text_empty_input_is_no_process() -> None:
    # GIVEN py-spy printed nothing
    # THEN there is nothing to report, and no error
    assert parse_pyspy_text("") == []


def test_text_truncated_after_process_header_keeps_the_process() -> None:
    # GIVEN the real text dump cut right after its "Python v" line
    text = read("local_pyspy0.4_text_blocked.txt")
    cut = text.index("Thread ")
    # WHEN parsed
    dumps = parse_pyspy_text(text[:cut])
    # THEN the process is known, without threads
    assert dumps == [ProcessDump(9877, "/work/main/.venv/bin/python blocked_rank.py", ())]


def test_text_hex_thread_id_and_active_gil_states() -> None:
    # GIVEN SYNTHETIC headers in the forms py-spy prints without an OS thread id
    text = (
        'Thread 0x7F3C2A1B4740 (active+gil): "MainThread"\n'
        "    forward (model.py:10)\n"
        "Thread 0x7F3C1F5FE640 (gil)\n"
        "    step (train.py:3)\n"
    )
    # WHEN parsed
    (dump,) = parse_pyspy_text(text)
    first, second = dump.threads
    # THEN hex ids are Python thread ids and the states are decoded
    assert (first.thread_id, first.os_thread_id, first.active, first.owns_gil) == (
        0x7F3C2A1B4740,
        None,
        True,
        True,
    )
    assert (second.name, second.active, second.owns_gil) == (None, False, True)

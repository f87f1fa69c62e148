"""One set of launcher-prefix rules for every job-log reader, on real lines of real jobs."""

from __future__ import annotations

from pathlib import Path

from slurmdiag.parsers.log_prefix import split_prefixes
from slurmdiag.parsers.nccl_log import parse_nccl_log
from slurmdiag.post_mortem.logs import parse_rank_log

PM = Path(__file__).resolve().parents[1] / "fixtures" / "postmortem"


def _line(path: Path, start: str) -> str:
    return next(line for line in path.read_text().splitlines() if line.startswith(start))


def test_srun_label_and_torch_rank_on_a_real_line():
    # GIVEN a line of a real srun --label job whose rank 1 printed a traceback through torch
    line = _line(PM / "local_nf_job.out", "1: [rank1]: RuntimeError")
    # WHEN split THEN the task, the global rank and the message are apart
    got = split_prefixes(line)
    assert (got.task, got.local_rank, got.rank) == (1, None, 1)
    assert got.rest.startswith("RuntimeError: [")


def test_torch_keeps_the_indentation_after_its_one_space():
    line = _line(PM / "local_nf_job.out", "0: [rank0]:   File ")
    assert split_prefixes(line).rest.startswith("  File ")


def test_torchrun_tee_prefix_is_a_local_rank():
    # GIVEN a real torchrun --tee line ([defaultN]: is the node's LOCAL rank)
    line = _line(PM / "torchrun" / "local_torchrun_tee_job.out", "[default1]:")
    got = split_prefixes(line)
    assert (got.task, got.local_rank, got.rank) == (None, 1, None)
    assert got.rest.startswith("/work/") or got.rest.startswith(" ")


def test_nested_prefixes_in_launch_order():
    got = split_prefixes(" 3: [1]<stderr>:[rank7]: boom")
    assert (got.task, got.local_rank, got.rank, got.rest) == (3, 1, 7, "boom")


def test_not_prefixes():
    # a pasted line number, a huge "label", another script's digits, a rank prefix mid-line
    for line in ("[80746] NCCL INFO", "1" * 5000 + ": x", "\u0663: x", "x [rank1]: y"):
        got = split_prefixes(line)
        assert (got.task, got.local_rank, got.rank, got.rest) == (None, None, None, line)


def test_both_readers_agree_on_a_real_log():
    # GIVEN the real node-failure job's log (srun --label, torch's [rankN]: in tracebacks)
    text = (PM / "local_nf_job.out").read_text()
    # WHEN both readers read it
    findings, tails, labelled = parse_rank_log(text, "job.out")
    nccl_line = _line(PM.parent / "nccl" / "jeanzay_a100_4node_nccl2.10.3_torchlaunch.log",
                      "jean-zay-iam37:261379:261379 [0] NCCL INFO NET/IB : Using")
    nccl = parse_nccl_log(f"1: [rank1]: {nccl_line}\n[rank1]: {nccl_line}\n", "job.out")
    # (and a real NCCL line behind the same prefixes)
    # THEN the post-mortem sees the labels and the ranks, the NCCL reader the same task and rank
    assert labelled and set(tails) == {0, 1, 2, 3}
    assert {f.rank for f in findings if f.kind == "peer_lost"} == {0, 1}
    assert [(f.fields.get("task"), f.rank) for f in nccl] == [("1", 1), (None, 1)]

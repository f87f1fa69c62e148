"""The launcher prefixes at the start of a job-log line: which task or rank wrote it.

One set of rules for every reader of job logs (the NCCL line finder, the post-mortem's rank
logs). In the order launchers nest them:

- ``srun --label``: ``3: `` (the task id, SLURM_PROCID; srun pads it: `` 3: ``);
- torchrun ``--tee``/``--redirects``: ``[default1]:`` or ``[1]<stdout>:`` -- a LOCAL rank,
  the node's own numbering; a bare ``[80746] `` is a pasted line number, not a prefix;
- torch.distributed's ``[rank3]:`` (the global rank), which torch writes before each line of
  a traceback it prints, followed by one space.

    >>> split_prefixes(" 3: [default1]:[rank7]: RuntimeError: boom")
    LinePrefixes(task=3, local_rank=1, rank=7, rest='RuntimeError: boom')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from slurmdiag.safeio import decimal_int

__all__ = ["RANK_PREFIX_RE", "SRUN_LABEL_RE", "TORCHRUN_PREFIX_RE", "LinePrefixes", "split_prefixes"]

# ASCII digits only (``\d`` admits other scripts' digits); numbers go through decimal_int, so a
# prefix of 5,000 digits is no prefix rather than int()'s ValueError.
SRUN_LABEL_RE = re.compile(r"^\s*(?P<task>[0-9]+): ")
TORCHRUN_PREFIX_RE = re.compile(r"^\s*\[(?:default(?P<a>[0-9]+)\]:|(?P<b>[0-9]+)\]<std(?:out|err)>:)")
#: Not anchored: a reader that allows timestamps before it searches with it.
RANK_PREFIX_RE = re.compile(r"\[rank(?P<rank>[0-9]+)\]:")


@dataclass(frozen=True)
class LinePrefixes:
    """What the prefixes of one line say, and the line without them."""

    task: int | None
    local_rank: int | None
    rank: int | None
    rest: str


def split_prefixes(line: str) -> LinePrefixes:
    """The srun label, torchrun's local rank and torch's ``[rankN]:`` at the start of ``line``,
    each optional, in that order; ``rest`` keeps the indentation after torch's one space."""
    task = local_rank = rank = None
    label = SRUN_LABEL_RE.match(line)
    if label and (task := decimal_int(label.group("task"))) is not None:
        line = line[label.end():]
    torchrun = TORCHRUN_PREFIX_RE.match(line)
    if torchrun and (local_rank := decimal_int(torchrun.group("a") or torchrun.group("b"))) is not None:
        line = line[torchrun.end():]
    torch_rank = RANK_PREFIX_RE.match(line)
    if torch_rank and (rank := decimal_int(torch_rank.group("rank"))) is not None:
        line = line[torch_rank.end():].removeprefix(" ")
    return LinePrefixes(task=task, local_rank=local_rank, rank=rank, rest=line)

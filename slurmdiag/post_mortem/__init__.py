"""``slurmdiag postmortem JOBID``: why a job that already ended, ended.

Slurm's record (sacct, else slurmctld's memory), the ranks' logs, Flight Recorder dumps written
on timeout and core files, turned into the same snapshot, summary and report as attach.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from slurmdiag.snapshot import Snapshot

__all__ = ["postmortem"]


def postmortem(job_id: str | int, *, out_dir: str | Path | None = None, write: bool = False,
               **options: Any) -> Snapshot:
    """Explain a finished job; returns its Snapshot (``write=True`` or ``out_dir``: files too).

    Options: logs=(paths...), flight_recorder=(TORCH_FR_DUMP_TEMP_FILE prefixes...),
    cores=True, core_dirs=(directories...).
    """
    from slurmdiag.post_mortem.build import postmortem_job

    return postmortem_job(str(job_id), out_dir=out_dir, write=write or out_dir is not None,
                          **options).snapshot

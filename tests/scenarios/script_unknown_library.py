"""Scenario: a script whose training loop runs at module level calls an installed library
slurmdiag does not know, on one rank, and waits in it for ever.

No main(): the loop is the module's own code, as scripts grown from a notebook are. Every
REFRESH_EVERY steps rank 2 refreshes the shard index through a small installed package (the
trainkit package of installed_package, here a third party's library in a site-packages of the
rank's own: the job's code is this file); this time the upstream export never finishes and
rank 2 polls for its marker for ever, inside the library. Ranks 0, 1, 3 wait in the next
step's gradient all_reduce, called from this module level too.

The job that makes "a script's module level that calls an installed package is a thin
launcher of the job's own package" lie: rank 2's program enters trainkit from the script's
module level, as a thin train.py enters its package; the others enter _training from it.
The culprit's site is this file's call, not the library's poll.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import _harness as harness
import _training as training
import torch.distributed as dist

# The library installed as pip installs it: its directory in a site-packages (one a task:
# the tasks of a node would race on one link), which is what its frames' paths then show.
_site = (Path(os.environ.get("SLURMDIAG_SCENARIO_DIR", "/tmp"))
         / f"libs-{os.environ.get('SLURM_PROCID', '0')}" / "lib"
         / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages")
_site.mkdir(parents=True, exist_ok=True)
if not (_site / "trainkit").exists():
    (_site / "trainkit").symlink_to(Path(__file__).resolve().parent / "trainkit")
sys.path.insert(0, str(_site))

from trainkit import shards  # installed just above

INDEX_RANK = 2
REFRESH_EVERY = 3
STEPS = 1000

info = harness.setup()
harness.init_distributed(info)
model = training.build_model()
for step in range(STEPS):
    if step == REFRESH_EVERY + 1 and info.rank != INDEX_RANK:
        harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
    loss = training.train_step(model, training.synthetic_batch(info.rank, step))
    harness.log(info, f"step {step} loss {loss:.4f}")
    if info.rank == INDEX_RANK and step > 0 and step % REFRESH_EVERY == 0:
        harness.report_ready(info, f"step {step}: polling for the export", role="culprit")
        shards.refresh_index(shards.export_marker())  # CULPRIT
dist.destroy_process_group()

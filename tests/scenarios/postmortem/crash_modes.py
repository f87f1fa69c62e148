"""Post-mortem scenarios: a job that ENDS, in one of the ways jobs end on real clusters.

The same small data-parallel loop as the hang scenarios (gloo, CPU, 2 nodes x 2 ranks); rank
3 is the culprit at step 3 unless said otherwise. POSTMORTEM_MODE chooses how the job ends:

- ``segfault``: rank 3 dereferences NULL through ctypes (SIGSEGV, core dumped under
  ``ulimit -c unlimited``); the others fail in gloo with "Connection closed by peer".
- ``gloo_timeout``: rank 3 stalls in ``load_next_shard`` (a stuck read, POSTMORTEM_STALL_S);
  the others wait in the step's all_reduce until the process group's timeout
  (POSTMORTEM_PG_TIMEOUT_S, 20 s) and raise; each dumps its Flight Recorder buffer to
  ``$TORCH_FR_DUMP_TEMP_FILE<rank>`` first, as NCCL's watchdog does on timeout (gloo has no such
  dump of its own). When rank 3's read returns, its all_reduce finds its peers gone.
- ``stall``: rank 3 stalls in ``load_next_shard`` as above with the default 2 h timeout; the
  test kills it with a signal (the OOM killer's SIGKILL), or cancels the job, or lets the
  time limit end it.
- ``size_mismatch``: at step 3 every rank sums its batch's class counts over the ranks
  (``torch.bincount``: as long as the largest label the rank saw, plus one); rank 3's batch
  holds the one label the others lack, so its tensor is one longer. gloo notices on the rank
  that receives from it and aborts that process (``gloo::EnforceNotMet``: "Received data size
  doesn't match expected size"), the others fail with "Connection reset/closed by peer": the
  rank that aborted is where the mismatch was seen, not the one that differs.
- ``monitored``: rank 3 stalls in ``load_next_shard`` (POSTMORTEM_STALL_S); the others call
  ``dist.monitored_barrier`` (10 s) before the step, as debugging guides advise: rank 0 raises
  naming rank 3, ranks 1-2 that they reached it and lost rank 0.
- ``exit``: rank 3 finds its shard empty, prints why on stderr and calls ``sys.exit(3)``: no
  traceback, no signal; srun (``--kill-on-bad-exit=1``) terminates the others, or, launched
  without it, the others lose rank 3 in gloo and exit 1.
- ``sigkill``: rank 3 is killed with SIGKILL at step 3 (what the OOM killer or an admin's
  ``kill -9`` does: no traceback, no core); launched by torchrun, its agent writes the failure
  summary naming global rank 3 (``exitcode : -9``) and ends the others.
- ``train``: nobody misbehaves; every rank keeps training. The test kills a node under it
  (its slurmd, the job's step daemons and ranks there, as a dead machine loses them):
  slurmctld marks the node DOWN after SlurmdTimeout and the job ends NODE_FAIL; the ranks on
  the surviving node lose their peers in gloo.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from datetime import timedelta

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

CULPRIT_RANK = 3
CULPRIT_STEP = 3
STEPS = 1000
#: How long the culprit's read stalls: past the others' 20 s timeout in gloo_timeout mode.
STALL_SECONDS = float(os.environ.get("POSTMORTEM_STALL_S", "3600"))


def load_next_shard(step: int) -> None:
    """Read the next shard from the shared filesystem (stalls on the culprit rank)."""
    time.sleep(STALL_SECONDS)  # CULPRIT


def decode_sample(buffer: int) -> bytes:
    """Decode a sample from a native buffer (a dangling one crashes the process)."""
    return ctypes.string_at(buffer, 16)  # CULPRIT


#: Labels of a batch: every rank's shard holds classes 0..NUM_CLASSES-2; rank 3's also the last.
NUM_CLASSES = 10


def class_counts(rank: int) -> torch.Tensor:
    """How often each class occurs in this step's batches, summed over the ranks."""
    seen = NUM_CLASSES if rank == CULPRIT_RANK else NUM_CLASSES - 1
    labels = torch.arange(64) % seen
    counts = torch.bincount(labels).float()  # as long as the largest label seen, plus one
    dist.all_reduce(counts)  # CULPRIT
    return counts


def dump_flight_recorder(rank: int) -> None:
    """What NCCL's watchdog does on a timeout: the Flight Recorder buffer to a per-rank file."""
    prefix = os.environ.get("TORCH_FR_DUMP_TEMP_FILE")
    if not prefix:
        return
    data = torch._C._distributed_c10d._dump_fr_trace()
    with open(f"{prefix}{rank}", "wb") as fh:
        fh.write(data)


def main() -> None:
    info = harness.setup()
    mode = os.environ.get("POSTMORTEM_MODE", "segfault")
    torch.set_num_threads(1)
    os.environ.setdefault("MASTER_ADDR", harness.master_address())
    os.environ.setdefault("MASTER_PORT", str(harness.derived_ports(harness.job_id())[0]))
    timeout_s = float(os.environ.get("POSTMORTEM_PG_TIMEOUT_S", "20")) if mode == "gloo_timeout" else 7200
    dist.init_process_group(backend="gloo", rank=info.rank, world_size=info.world_size,
                            timeout=timedelta(seconds=timeout_s))
    model = training.build_model()
    for step in range(STEPS):
        if step == CULPRIT_STEP and mode == "train":
            harness.report_ready(info, f"step {step}: training", role="healthy")
        elif step == CULPRIT_STEP and mode == "size_mismatch":
            harness.report_ready(info, f"step {step}: class counts", role="culprit"
                                 if info.rank == CULPRIT_RANK else "waiting")
            class_counts(info.rank)
        elif step == CULPRIT_STEP and info.rank == CULPRIT_RANK:
            harness.report_ready(info, f"step {step}: {mode}", role="culprit")
            if mode == "segfault":
                decode_sample(8)  # a freed buffer's address
            elif mode == "exit":
                print(f"rank {info.rank}: shard {step} has 0 samples, giving up", file=sys.stderr)
                sys.exit(3)
            elif mode == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            else:
                load_next_shard(step)
        elif step == CULPRIT_STEP:
            harness.report_ready(info, f"step {step}: all_reduce", role="waiting")
            if mode == "monitored":
                dist.monitored_barrier(timeout=timedelta(seconds=10))  # WAITING
        try:
            loss = training.train_step(model, training.synthetic_batch(info.rank, step))  # WAITING
        except RuntimeError:
            if mode == "gloo_timeout":
                # every rank whose collective failed dumps, as NCCL's ranks all do once one of
                # them times out (its watchdog tells the others through the store)
                dump_flight_recorder(info.rank)
            raise
        harness.log(info, f"step {step} loss {loss:.4f}")
        time.sleep(0.2)
    dist.destroy_process_group()
    sys.exit(0)


if __name__ == "__main__":
    main()

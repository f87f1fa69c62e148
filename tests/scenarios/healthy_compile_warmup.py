"""Scenario (control): rank 0's torch.compile warm-up outlasts the others'.

Every rank compiles its model with torch.compile (Inductor on the CPU: C++ kernels built by
its compile workers with the system's compiler) and runs one warm-up pass; rank 0 first
compiles its evaluation function for each of the 40 batch shapes it will see. So ranks 1-3 wait in
the first gradient all_reduce for a minute or more while rank 0 compiles, its main thread busy
in Dynamo and Inductor or waiting on its compile workers. Then the job trains, 1-s steps,
every rank logging every step. A compiled job's first steps are its slowest: this must never be flagged as
hung.
"""

from __future__ import annotations

import os
import time

# A compile cache of the job's own, named as torch names its default (/tmp/torchinductor_<user>),
# and no earlier run's graphs reused: every run compiles, as a job's first run on a node does.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(
    os.environ.get("SLURMDIAG_SCENARIO_DIR", "/tmp"),
    f"torchinductor_job{os.environ.get('SLURM_JOB_ID', '')}")
os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"

import _harness as harness
import _training as training
import torch
import torch.distributed as dist
from torch import nn

#: The evaluation's batch shapes, each compiled on its own (dynamic=False): the recompiles of an
#: evaluation over batches of varying size, the limit raised so that all are compiled
EVAL_BATCH_SIZES = tuple(range(8, 8 * 41, 8))
#: ~30 minutes of 1-s steps, the job's time limit
STEPS = 1800
STEP_SECONDS = 1.0


def warm_up(model: nn.Module) -> None:
    """One forward and backward of the compiled model, its gradients dropped."""
    inputs, targets = training.synthetic_batch(0, 0)
    nn.functional.mse_loss(model(inputs), targets).backward()
    model.zero_grad(set_to_none=True)


def compile_evaluation(model: nn.Module) -> None:
    """The evaluation function, compiled for each batch shape it is called with."""
    torch._dynamo.config.cache_size_limit = len(EVAL_BATCH_SIZES) + 8
    evaluate = torch.compile(lambda x: torch.sigmoid(model(x)).mean(), dynamic=False)
    with torch.no_grad():
        for size in EVAL_BATCH_SIZES:
            evaluate(torch.randn(size, training.FEATURES))


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = torch.compile(training.build_model())
    if info.rank == 0:
        harness.report_ready(info, "compiling its evaluation and its model", role="healthy")
        compile_evaluation(model)
    warm_up(model)
    if info.rank != 0:
        harness.report_ready(info, "first gradient all_reduce", role="healthy")
    for step in range(STEPS):
        time.sleep(STEP_SECONDS)  # reading the step's data
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

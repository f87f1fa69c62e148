"""Scenario: a debugger attached to one rank and left there holds it stopped.

Someone investigating rank 2 attached a debugger to it (gdb -p, a py-spy without
--nonblocking that never detached, an IDE's "attach to process") and walked away: the
debugger holds every thread of rank 2 in a tracing stop (state t) and never lets it go on.
Here the debugger is a small ptrace tracer started by rank 2 itself at step 3 (PTRACE_SEIZE
and PTRACE_INTERRUPT of each thread, then nothing): the same stop as gdb's. Ranks 0, 1, 3
wait in the next gradient all_reduce. `kill -CONT` does not resume a traced process: its
tracer must detach (or exit).
"""

from __future__ import annotations

import os
import subprocess
import sys

import _harness as harness
import _training as training
import torch.distributed as dist

STOP_RANK = 2
STOP_AT_STEP = 3
STEPS = 1000

#: The forgotten debugger: seizes every thread of the pid, interrupts them, then waits forever.
DEBUGGER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_SEIZE, PTRACE_INTERRUPT = 0x4206, 0x4207
pid = int(sys.argv[1])
for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
    if libc.ptrace(PTRACE_SEIZE, tid, None, None) != 0:
        sys.exit(f"ptrace seize {tid}: {os.strerror(ctypes.get_errno())}")
    libc.ptrace(PTRACE_INTERRUPT, tid, None, None)
print("attached", flush=True)
while True:
    time.sleep(3600)
"""


def attach_debugger() -> subprocess.Popen[str]:
    """Start the debugger on this process; returns once it holds every thread."""
    debugger = subprocess.Popen([sys.executable, "-c", DEBUGGER, str(os.getpid())],
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert debugger.stdout is not None
    debugger.stdout.readline()  # CULPRIT
    return debugger


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    for step in range(STEPS):
        if step == STOP_AT_STEP:
            if info.rank == STOP_RANK:
                harness.report_ready(info, f"step {step}: stopped by a debugger", role="culprit")
                attach_debugger()  # returns never: the debugger stops this thread in it
            else:
                harness.report_ready(info, f"step {step}: gradient all_reduce", role="waiting")
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

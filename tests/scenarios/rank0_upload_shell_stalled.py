"""Scenario: rank 0's copy tool, run through a shell, stalls while the others wait in a
barrier.

`rank0_upload_shell_barrier`'s hung twin: the gateway reads the request's header and then
nothing more. The copy tool (sh's child, rank 0's grandchild) sits in its send on a quiet
connection; sh waits for it, rank 0 for sh; ranks 1-3 wait in `dist.barrier()`.
"""

from __future__ import annotations

import rank0_upload_tool_barrier as tool

if __name__ == "__main__":
    tool.main(stalled=True, shell=True)

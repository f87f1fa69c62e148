"""Scenario: rank 0's copy tool stalls while the others wait in a barrier.

`rank0_upload_tool_barrier`'s hung twin: the same program, with a storage gateway that reads
the request's header and then nothing more, the connection left open. The copy tool (rank 0's
child) sits in its send on a quiet connection; rank 0 waits for it in `waitpid`; ranks 1-3
wait in `dist.barrier()`.
"""

from __future__ import annotations

import rank0_upload_tool_barrier as tool

if __name__ == "__main__":
    tool.main(stalled=True)

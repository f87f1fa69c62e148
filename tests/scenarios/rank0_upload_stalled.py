"""Scenario: rank 0's checkpoint upload stalls while the others wait in a barrier.

`rank0_upload_barrier`'s hung twin: the same program, with a storage gateway that reads the
request's header and then stops reading, the connection left open. Rank 0's blocking send
fills the socket buffers and sits there; its connection carries no data any more. Ranks 1-3
wait in `dist.barrier()`.
"""

from __future__ import annotations

import rank0_upload_barrier as upload

if __name__ == "__main__":
    upload.main(stalled=True)

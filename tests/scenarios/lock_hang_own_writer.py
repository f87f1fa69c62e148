"""Scenario: rank 2 deadlocks on its own lock while a busy writer thread of its own, and of no
other rank, compresses and writes trace chunks without a pause.

`lock_hang_busy_writer` with the writer on rank 2 alone and busy: the sight of
`rank0_async_save_lock` (a main thread idle on a lock, another thread of the rank working, the
process writing megabytes a second that no waiting rank writes), hung. The job that makes the
rule "a lock held by a working thread is a slow phase" lie.
"""

from __future__ import annotations

import lock_hang_busy_writer as busy_writer

if __name__ == "__main__":
    busy_writer.main(writers=frozenset({busy_writer.STUCK_RANK}), packed=True)

"""Scenario (control): `pipeline_heartbeat_hang`'s job, healthy: its last stage's labels are slow.

The same four stages and health thread; the last stage's label loader lives, but decodes each
record in Python for 2.5 s (a slow tokenizer), one record ahead. So the last stage waits in
`queue.get()` for seconds at a time and stages 0-2 wait in their sends and receives for it,
every main thread asleep through strace's window, while the health checks move data between
every pair of ranks: the stacks of its hung twin, with the loader thread busy. Every rank logs
each step (~10 s). It must never get a hang verdict.
"""

from __future__ import annotations

from pipeline_heartbeat_hang import main

#: Seconds of a core to decode one label record: longer than strace's window.
DECODE_S = 2.5

if __name__ == "__main__":
    main(decode_s=DECODE_S)

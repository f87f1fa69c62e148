"""Scenario (control): rank 0 runs the copy tool through a shell while the others wait in a
barrier.

`rank0_upload_tool_barrier` with `subprocess.run("... && echo uploaded", shell=True)`, as
`os.system` and job scripts' one-liners do: rank 0's child is sh, idle in `wait4` for its own
child, the copy tool, which sends the checkpoint to a slow gateway: the data moves in a
grandchild of the rank's. Ranks 1-3 wait in `dist.barrier()`. Must never be flagged.
"""

from __future__ import annotations

import rank0_upload_tool_barrier as tool

if __name__ == "__main__":
    tool.main(shell=True)

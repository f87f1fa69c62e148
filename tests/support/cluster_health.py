"""The local cluster's node daemons: which died, and starting them again.

A slurmd died once under the suite (glibc's "tcache_thread_shutdown(): unaligned tcache chunk
detected" abort in node002's slurmd, during the start burst of ~28 scenario jobs): Slurm set the
node DOWN, its jobs were lost, and every test after failed in cascade. `cluster up` starts only
the slurmds that are not running (the controller and the other nodes untouched), and
ReturnToService=2 puts the node back once it registers.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

_DEAD = re.compile(r"^slurmd (\S+): NOT running$", re.MULTILINE)


def dead_slurmds(status: str) -> list[str]:
    """The nodes whose slurmd `cluster status` says is not running."""
    return _DEAD.findall(status)


def restart_dead_slurmds(script: Path, nodes: int) -> list[str]:
    """Start again every slurmd of the local cluster that died; the nodes restarted (none when
    every slurmd runs, no cluster is configured, or the caller uses another cluster)."""
    if not script.exists() or not os.environ.get("SLURM_CONF"):
        return []
    try:
        status = subprocess.run([str(script), "status"], capture_output=True, text=True,
                                timeout=120, check=False)
        dead = dead_slurmds(status.stdout)
        if dead:
            subprocess.run([str(script), "up", "--nodes", str(nodes)], capture_output=True,
                           text=True, timeout=600, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return dead

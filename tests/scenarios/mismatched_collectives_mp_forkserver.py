"""Scenario: mismatched_collectives_mp_process with the forkserver start method.

The same script started with ``multiprocessing.set_start_method("forkserver")`` (the default
from Python 3.14 on): the ranks are not children of the script but of its fork server, a
process the script spawned first. The script waits for them in ``Process.join``.
"""

from __future__ import annotations

import mismatched_collectives_mp_process

if __name__ == "__main__":
    mismatched_collectives_mp_process.main("forkserver")

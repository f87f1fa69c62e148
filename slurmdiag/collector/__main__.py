"""The collector's program: what the loader runs on a node (``python -m slurmdiag.collector``)."""

import posix
import sys

from .main import main

posix._exit(main(sys.argv))  # nothing left to flush: frames go out with os.write

"""``python -m slurmdiag``: the same command line as ``slurmdiag``."""

from __future__ import annotations

import sys

from slurmdiag.cli import main

sys.exit(main())

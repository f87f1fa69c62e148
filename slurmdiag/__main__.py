import sys

from slurmdiag.cli import main

sys.exit(main())

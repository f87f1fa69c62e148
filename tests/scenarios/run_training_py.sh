#!/bin/bash
# A site's wrapper written in Python (the shape of `conda run -n ENV python ...` or of a
# project's own `launch.py`): bash hands the training command to _python_wrapper.py, which sets
# up the environment and runs the command as its CHILD. Each srun task is then a Python process
# that is not a rank, and the rank is its child, with the same Slurm identity.
exec "$1" -u "$(dirname "$0")/_python_wrapper.py" "$@"

#!/bin/bash
# A site's wrapper around the training command, as many clusters have one: it sets up the
# environment and runs python as its CHILD (no `exec`), so that it can report the exit
# status afterwards. Each srun task is then bash, and the rank is bash's child.
set -u
export TRAIN_WRAPPER="$(hostname):${SLURM_PROCID:-?}"
echo "wrapper on $TRAIN_WRAPPER: starting $*"
"$@"
status=$?
echo "wrapper on $TRAIN_WRAPPER: training exited with status $status"
exit $status

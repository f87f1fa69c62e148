#!/bin/bash
# A site's task wrapper that starts a monitor for its task's GPU in the background, then runs
# the training command in its place: each srun task then holds two Python processes with the
# task's SLURM_PROCID, the monitor (started first, lower pid) and the rank.
"$1" -u "$(dirname "$0")/_node_monitor.py" &
exec "$@"

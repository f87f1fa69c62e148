#!/bin/bash
# A site's guard against runaway jobs: the training command runs under coreutils' timeout,
# which stays as its PARENT (timeout forks the command and waits, to kill it at the limit).
# Each srun task is then `timeout`, not bash and not python, and the rank is its child.
set -u
exec timeout --kill-after=30 7200 "$@"

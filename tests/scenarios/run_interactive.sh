#!/bin/bash
# An interactive launch's standard input (salloc, then srun from a terminal: srun forwards the
# terminal to the tasks), with nobody typing: a FIFO opened read-write, whose reads wait for
# ever; no other process. Called as `run_interactive.sh PYTHON ...`.
set -eu
fifo="${SLURMDIAG_SCENARIO_DIR:-/tmp}/stdin-${SLURM_PROCID:-0}"
rm -f "$fifo"
mkfifo "$fifo"
exec "$@" 0<>"$fifo"

#!/bin/bash
# A site's wrapper whose staging step is a Python script: it waits for the node's copy of the
# dataset (a marker file a copy service writes when done) before it starts the training. On the
# second node the copy never finishes, so the staging script polls for ever, holding the task's
# Slurm identity (SLURM_PROCID) while no rank of that node has started. Called as
# `run_with_python_staging.sh PYTHON ...`.
set -u
"$1" -u "$(dirname "$0")/_stage_dataset.py"
"$@"

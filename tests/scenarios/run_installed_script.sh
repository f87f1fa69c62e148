#!/bin/bash
# The training package installed as pip installs it (run_installed.sh), started by a thin
# script of the job's own instead of the console script: `python train.py`, where train.py
# (outside site-packages, as a repository's scripts/ or a container's /workspace) only
# imports the package's main and calls it. Called as `run_installed_script.sh PYTHON -u
# PACKAGE/cli.py`.
export SLURMDIAG_INSTALLED_ENTRY=script
exec bash "$(dirname "$0")/run_installed.sh" "$@"

#!/bin/bash
# A site's wrapper that stages the dataset to node-local disk before it starts the training:
# the copy of the second node never ends (a stalled parallel filesystem read, emulated by a
# sleep in the copy step), so its ranks are never started while the first node's wait for them
# in init_process_group. Each srun task is bash; the ranks are its python children.
set -u
stage_dataset() {
    if [ "${SLURM_NODEID:-0}" = "1" ]; then
        sleep 3600  # CULPRIT
    fi
}
stage_dataset
"$@"

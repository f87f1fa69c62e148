#!/bin/bash
# A site's wrapper whose staging is slow but works: the second node copies its shard (120 MB)
# to node-local disk at 1 MB/s (rsync --bwlimit: a throttled parallel file system) before it
# starts the training, ~2 minutes; the first node has its copy already and starts at once.
# Called as `run_with_slow_staging.sh PYTHON ...`.
set -u
stage_dataset() {
    if [ "${SLURM_NODEID:-0}" = "1" ]; then
        local shard="${SLURMDIAG_SCENARIO_DIR:-/tmp}/shard-${SLURM_PROCID:-0}.bin"
        head -c 120M /dev/urandom > "$shard"
        rsync --bwlimit=1000 "$shard" "$shard.local"
        rm -f "$shard" "$shard.local"
    fi
}
stage_dataset
"$@"

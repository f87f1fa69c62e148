#!/bin/bash
# A container runtime's shape around the training command (podman, apptainer --containall,
# enroot with a PID namespace): the rank runs in its own PID namespace with its own /proc, as
# pid 1's child there. Inside, os.getpid() and the threads' ids are the namespace's; the node
# sees other numbers. The environment passes through, as runtimes do for SLURM_* by default.
set -u
exec unshare --pid --fork --mount-proc "$@"

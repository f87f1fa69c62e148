#!/bin/bash
# A site's wrapper that runs the training, then copies the task's logs and core files to the
# project's archive when it failed, before it exits with the training's status. The archive
# is slow (a stalled parallel filesystem write, emulated by a sleep in the copy step): the
# wrapper outlives its crashed python child, so srun sees no task end. Each srun task is bash;
# the rank is its python child, and after a crash only the wrapper is left.
set -u
upload_crash_logs() {
    sleep 3600
}
"$@"
status=$?
if [ "$status" -ne 0 ]; then
    upload_crash_logs
fi
exit "$status"

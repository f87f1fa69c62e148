"""The accuracy table in its quick form: a few scenarios through the comparison `make accuracy`
uses, attached with the real CLI, with the defaults and with --samples 1.

The whole table (every scenario, docs/accuracy.md) is `make accuracy`; these are scenarios
slurmdiag must keep getting right: a rank blocked in the kernel (FIFO open), a
`python -m` package whose last rank deadlocks on its own lock, a wrapper shell script that
runs python without exec (culprit rank 0), and the healthy control (no false alarm).
"""

from __future__ import annotations

import pytest
from accuracy import MODES, attach_cli, compare

pytestmark = pytest.mark.cluster

QUICK = ["fifo_open", "module_lock_deadlock", "wrapper_no_exec", "healthy_slow"]


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("scenario", QUICK)
def test_verdict_matches_the_ground_truth(scenario_run, scenario, mode, tmp_path):
    # GIVEN a real scenario job, every rank in its hang (or, for the control, training)
    run = scenario_run(scenario)
    # WHEN the CLI attaches (`slurmdiag attach JOB --json --no-report --out DIR` [--samples 1])
    snapshot = attach_cli(run.job_id, MODES[mode], tmp_path)
    # THEN kind, culprit ranks and site are the truth's, and a healthy job raises no alarm
    result = compare(run.truth, snapshot, mode)
    assert result.right, (result, [(v["kind"], v["severity"], v["summary"])
                                   for v in snapshot.get("verdicts", [])])
    if run.truth["expected_kind"] != "progressing":
        assert set(result.produced.culprit_ranks) == set(run.truth["culprit_ranks"])

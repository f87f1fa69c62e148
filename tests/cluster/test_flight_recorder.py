"""Flight Recorder on demand: a real hung gloo job hooked with slurmdiag.torch.install()."""

from __future__ import annotations

import pytest
from scenarios.launch import submit

from slurmdiag.analysis import analyze
from slurmdiag.analysis.flight import flight_verdicts
from slurmdiag.api import collect_snapshot
from slurmdiag.options import AttachOptions

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def hooked_mismatch(local_cluster, tmp_path_factory):
    # The mismatched-collectives scenario (rank 1 all_gather, the others all_reduce), with the
    # hook installed before init_process_group, as a user would.
    state_dir = tmp_path_factory.mktemp("fr")
    run = submit("mismatched_collectives", state_dir,
                 env={"SLURMDIAG_SCENARIO_FLIGHT_RECORDER": "1",
                      "SLURMDIAG_FR_DIR": str(state_dir / "fr")})
    try:
        run.wait_ready(timeout=120)
        yield run
    finally:
        run.cancel()


def test_attach_triggers_dumps_and_names_the_mismatched_collective(hooked_mismatch):
    # WHEN attaching with --flight-recorder
    snapshot, _ = collect_snapshot(
        hooked_mismatch.job_id, AttachOptions(samples=1, strace_s=0, timeout_s=40,
                                              flight_recorder=True))
    # THEN every rank's dump came back through the collectors
    section = snapshot.flight_recorder
    assert section is not None
    assert sorted(section["dumps"]) == ["0", "1", "2", "3"], section["errors"]
    assert section["missing_ranks"] == []
    # AND the alignment names the first disagreeing collective, its ops, and rank 1
    verdicts = flight_verdicts(section)
    assert len(verdicts) == 1
    verdict = verdicts[0]
    assert verdict.kind == "flight_recorder_mismatch"
    assert verdict.culprit_ranks == (1,)
    assert "gloo:all_gather" in verdict.evidence[0] and "gloo:all_reduce" in verdict.evidence[0]
    assert "collective #" in verdict.summary
    assert len(verdict.sites) == 1
    assert verdict.sites[0].endswith(hooked_mismatch.truth["culprit_site"])
    # AND the full analysis carries that verdict next to the stack-based one
    kinds = [v.kind for v in analyze(snapshot).verdicts]
    assert "flight_recorder_mismatch" in kinds and "mismatched_collective" in kinds

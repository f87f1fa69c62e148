"""`make demo`: submit a hanging scenario to the local cluster, attach to it, show the result.

Run by the Makefile after the cluster is up; uses the repo's .venv python.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.scenarios.launch import submit  # noqa: E402 - after the path is set

SCENARIO = os.environ.get("SLURMDIAG_DEMO_SCENARIO", "rank_gated_collective")


def main() -> int:
    cluster_env = subprocess.run(
        [str(REPO / "deploy/local-cluster/cluster"), "env"], capture_output=True, text=True,
        check=True,
    ).stdout
    for line in cluster_env.splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            os.environ[key] = value.strip("'\"")
    state_dir = Path(tempfile.mkdtemp(prefix="slurmdiag-demo-"))
    print(f"demo: submitting the '{SCENARIO}' scenario (a real hung torch.distributed job)")
    run = submit(SCENARIO, state_dir)
    try:
        print(f"demo: job {run.job_id} submitted; waiting until every rank reaches its hang")
        run.wait_ready(timeout=120)
        out_dir = REPO / "slurmdiag-demo"
        print(f"demo: slurmdiag attach {run.job_id}\n")
        code = subprocess.call(
            [str(REPO / ".venv/bin/slurmdiag"), "attach", str(run.job_id), "--out", str(out_dir)]
        )
        print(f"\ndemo: ground truth: culprit ranks {run.truth['culprit_ranks']} at "
              f"{run.truth.get('culprit_site') or run.truth.get('culprit_function')}")
        print(f"demo: report: {out_dir / 'report.html'}")
        return code
    finally:
        run.cancel()


if __name__ == "__main__":
    sys.exit(main())

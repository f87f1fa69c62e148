"""`slurmdiag probe` from the command line on the real local cluster (nodes share the host's
network: the probe still runs every test, over the default route)."""

from __future__ import annotations

import json

import pytest

from slurmdiag.cli import main

pytestmark = pytest.mark.cluster


def test_probe_nodes_writes_snapshot_report_and_a_summary(local_cluster, tmp_path, capsys):
    # WHEN probing four nodes of the local cluster in a fresh allocation
    code = main(["probe", "--nodes", "node[001-004]", "--no-collective", "--timeout", "30",
                 "--out", str(tmp_path)])
    out = capsys.readouterr().out
    # THEN it succeeds, names nothing, and says so with the matrix on the terminal
    assert code == 0, out
    assert "probe_clean" in out and "from/to" in out
    snapshot = json.loads((tmp_path / "snapshot.json").read_text())
    assert snapshot["probe"]["mode"] == "nodes" and len(snapshot["probe"]["links"]) == 12
    assert [v["kind"] for v in snapshot["verdicts"]] == ["probe_clean"]
    html = (tmp_path / "report.html").read_text()
    assert 'id="probe"' in html and html.count('class="pm-ok') == 12
    assert oct((tmp_path / "report.html").stat().st_mode & 0o777) == "0o640"


def test_probe_of_a_job_that_does_not_exist_is_a_one_line_error(local_cluster, capsys):
    code = main(["probe", "99999999"])
    err = capsys.readouterr().err
    assert code == 3
    assert err.startswith("error: ") and "hint: " in err and "Traceback" not in err

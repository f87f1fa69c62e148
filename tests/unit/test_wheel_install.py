"""The templates ship inside the wheel: a report renders from a wheel install, not the source tree."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURE = REPO / "tests" / "fixtures" / "snapshots" / "synthetic_rank_gated.json"


def test_report_renders_from_a_wheel_install(tmp_path):
    # GIVEN a wheel built from the repo, installed into its own directory
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(REPO)], check=True, timeout=300,
                   capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("slurmdiag-*.whl")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), str(wheel)], check=True, timeout=300, capture_output=True)
    # WHEN python runs without site (so the editable install's finder is not loaded), with the
    # wheel's files first and the venv's dependencies (jinja2) after them, from another directory
    deps = sysconfig.get_paths()["purelib"]
    code = (
        "import sys, slurmdiag, slurmdiag.cli\n"
        f"assert slurmdiag.__file__.startswith({str(target)!r}), slurmdiag.__file__\n"
        f"sys.exit(slurmdiag.cli.main(['report', {str(FIXTURE)!r}, '-o', 'r.html']))\n"
    )
    done = subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, timeout=120,
                          env={**os.environ, "PYTHONPATH": f"{target}{os.pathsep}{deps}"},
                          capture_output=True, text=True, check=False)
    # THEN the report was rendered from the templates inside the installed package
    assert done.returncode == 0, done.stderr
    assert (target / "slurmdiag" / "templates" / "report.html.j2").exists()
    assert "<!doctype html>" in (tmp_path / "r.html").read_text().lower()


def test_the_editable_install_maps_templates_to_the_source_folder(tmp_path):
    # GIVEN the project's venv (an editable install, `make venv`), run from another directory
    code = (
        "from importlib import resources\n"
        "from slurmdiag.report.render import _load_template\n"
        "print(resources.files('slurmdiag.templates'))\n"
        "assert '<!doctype html>' in _load_template('report.html.j2').lower()\n"
        "assert _load_template('no-such.j2') is None\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, timeout=120,
                          capture_output=True, text=True, check=False)
    # THEN the one loading path (the installed slurmdiag.templates) is the top-level templates/
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).resolve() == (REPO / "templates").resolve()

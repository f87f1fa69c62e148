"""Session fixtures for tests that need the real local Slurm cluster and real hung jobs.

Fixtures
--------
local_cluster   the local Slurm cluster (deploy/local-cluster/cluster), started with
                `cluster up --nodes 4` when `scontrol ping` fails; sets os.environ["SLURM_CONF"].
scenario_run    session cache of scenario jobs (tests/scenarios/<name>.json):
                    run = scenario_run("rank_gated_collective")  # submitted once, waited ready
                    run.pid(rank), run.truth, run.job_id, run.state_dir, run.output()
                A job needs 10-20 s alone to import torch and reach its hang on 2 cores, so
                jobs should start together: at its first use the fixture submits every
                scenario that a selected test names, by `@pytest.mark.scenario("a", "b")` or
                by a parameter called `scenario`. scenario_run.start("a", ...) submits more
                without waiting (no names: every scenario). All jobs are cancelled at the
                end of the session.
py_spy          path of the py-spy binary (the venv's first).

Before any test that is marked `cluster` or uses `py_spy` runs, the session stops with a
message saying what to install when py-spy is missing or ptrace is not permitted.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
CLUSTER_SCRIPT = REPO_ROOT / "deploy" / "local-cluster" / "cluster"
CLUSTER_NODES = 4
#: A scenario job needs 10-20 s alone; with the ~17 suite scenarios starting at once on 2 cores,
#: 60-120 s (a bound on waiting, not a timing assertion).
SCENARIO_READY_TIMEOUT = 180.0

if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from scenarios.launch import ScenarioError, ScenarioRun, scenario_names, submit

# Every test talks to servers on loopback only (webhooks, sshd, the report server): a proxy
# from the environment must not take those requests, in this process or in the ones it starts.
for _name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
    os.environ.pop(_name, None)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "scenario(*names): scenario jobs the test uses; scenario_run starts them all together",
    )


# ---------------------------------------------------------------- py-spy and ptrace

def py_spy_path() -> str | None:
    venv_bin = str(Path(sys.executable).parent)
    return shutil.which("py-spy", path=venv_bin) or shutil.which("py-spy")


def _py_spy_problem() -> str | None:
    """Why py-spy cannot dump a process here, or None when it can (checked for real)."""
    py_spy = py_spy_path()
    if py_spy is None:
        return ("py-spy not found next to the interpreter or on PATH.\n"
                "hint: pip install 'py-spy>=0.3.14'  (or: pip install -e '.[test]')")
    # The target says when its interpreter is up: a dump before that fails for other reasons.
    target = subprocess.Popen(
        [sys.executable, "-c", "import time; print('ready', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert target.stdout is not None
        target.stdout.readline()
        done = subprocess.run([py_spy, "dump", "--pid", str(target.pid)],
                              capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return "py-spy dump of a sleeping python process did not finish in 30 s"
    finally:
        target.kill()
        target.wait()
    if done.returncode == 0:
        return None
    scope = Path("/proc/sys/kernel/yama/ptrace_scope")
    scope_text = scope.read_text().strip() if scope.exists() else "n/a"
    said = done.stderr.strip() or done.stdout.strip()
    return (f"py-spy cannot attach to a process (ptrace): {said}\n"
            f"kernel.yama.ptrace_scope = {scope_text}\n"
            "hint: run the tests as root, or `sysctl -w kernel.yama.ptrace_scope=0`; "
            "in a container add `--cap-add=SYS_PTRACE`.")


def pytest_collection_finish(session: pytest.Session) -> None:
    needs_py_spy = any(
        item.get_closest_marker("cluster") is not None
        or "py_spy" in getattr(item, "fixturenames", ())
        for item in session.items
    )
    if not needs_py_spy:
        return
    problem = _py_spy_problem()
    if problem:
        pytest.exit(f"cannot run the selected tests: {problem}",
                    returncode=pytest.ExitCode.USAGE_ERROR)


@pytest.fixture(scope="session")
def py_spy() -> str:
    path = py_spy_path()
    assert path is not None  # pytest_collection_finish stopped the session otherwise
    return path


# ---------------------------------------------------------------- the local cluster

def _adopt_cluster_environment() -> None:
    """Point SLURM_CONF at the local cluster unless the caller chose a cluster already."""
    if os.environ.get("SLURM_CONF") or not CLUSTER_SCRIPT.exists():
        return
    done = subprocess.run([str(CLUSTER_SCRIPT), "env"], capture_output=True, text=True,
                          timeout=60, check=False)
    exports = re.findall(r"^export (\w+)=['\"]?([^'\"\n]*)['\"]?$", done.stdout, re.MULTILINE)
    for key, value in exports:
        os.environ[key] = value


def _slurm_responds() -> bool:
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True,
                              timeout=30, check=False)
        nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True,
                               text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    usable = [line for line in nodes.stdout.splitlines()
              if re.search(r"\b(idle|mixed|allocated|completing)\b", line)]
    return ping.returncode == 0 and "UP" in ping.stdout and len(usable) >= 2


@pytest.fixture(scope="session")
def local_cluster() -> dict[str, str]:
    """A responding Slurm cluster; starts the local one when needed. Returns its SLURM_CONF."""
    _adopt_cluster_environment()
    if not _slurm_responds():
        if not CLUSTER_SCRIPT.exists():
            pytest.fail(f"no Slurm cluster answers and {CLUSTER_SCRIPT} is missing")
        up = subprocess.run([str(CLUSTER_SCRIPT), "up", "--nodes", str(CLUSTER_NODES)],
                            capture_output=True, text=True, timeout=600, check=False)
        if up.returncode != 0:
            pytest.fail(f"`cluster up` failed ({up.returncode}):\n{up.stderr[-3000:]}")
        os.environ.pop("SLURM_CONF", None)
        _adopt_cluster_environment()
        if not _slurm_responds():
            pytest.fail("`cluster up` succeeded but scontrol ping / sinfo do not see the nodes")
    return {"SLURM_CONF": os.environ.get("SLURM_CONF", "")}


# ---------------------------------------------------------------- scenario jobs

class ScenarioJobs:
    """Each scenario job is submitted at most once per session and shared by every test."""

    def __init__(self, base_dir: Path, ready_timeout: float = SCENARIO_READY_TIMEOUT) -> None:
        self.base_dir = base_dir
        self.ready_timeout = ready_timeout
        self._runs: dict[str, ScenarioRun] = {}
        self._failures: dict[str, str] = {}
        self._ready: set[str] = set()

    def start(self, *names: str) -> None:
        """Submit the named scenarios (all when none are named) not running yet; no waiting."""
        for name in names or tuple(scenario_names()):
            if name in self._runs or name in self._failures:
                continue
            try:
                self._runs[name] = submit(name, self.base_dir / name)
            except ScenarioError as error:
                self._failures[name] = str(error)

    def __call__(self, name: str) -> ScenarioRun:
        """The scenario's job once every rank is in its hang; fails the test otherwise."""
        self.start(name)
        if name in self._failures:
            pytest.fail(self._failures[name], pytrace=False)
        run = self._runs[name]
        if name not in self._ready:
            try:
                run.wait_ready(self.ready_timeout)
            except ScenarioError as error:
                self._failures[name] = str(error)
                pytest.fail(str(error), pytrace=False)
            self._ready.add(name)
        return run

    def runs(self) -> dict[str, ScenarioRun]:
        return dict(self._runs)

    def cancel_all(self) -> None:
        for run in self._runs.values():
            run.cancel()


def scenarios_wanted(items: list[pytest.Item]) -> list[str]:
    """Scenario names the given tests use (marker `scenario` or a parameter `scenario`)."""
    names: list[str] = []
    for item in items:
        for mark in item.iter_markers("scenario"):
            names.extend(mark.args)
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "scenario" in callspec.params:
            names.append(callspec.params["scenario"])
    return list(dict.fromkeys(names))


@pytest.fixture(scope="session")
def scenario_run(request: pytest.FixtureRequest, local_cluster: dict[str, str],
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScenarioJobs]:
    jobs = ScenarioJobs(tmp_path_factory.mktemp("scenarios"))
    try:
        wanted = scenarios_wanted(request.session.items)
        if wanted:
            jobs.start(*wanted)
        yield jobs
    finally:
        jobs.cancel_all()

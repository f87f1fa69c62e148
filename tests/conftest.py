"""Session fixtures for tests that need the real local Slurm cluster and real hung jobs.

Fixtures
--------
local_cluster   the local Slurm cluster (deploy/local-cluster/cluster), started with
                `cluster up --nodes 4` when `scontrol ping` fails; sets os.environ["SLURM_CONF"].
                A slurmd that died is started again (support/cluster_health.py), here and
                when a scenario job is not ready (that scenario then gets one more job).
scenario_run    session cache of scenario jobs (tests/scenarios/<name>.json):
                    run = scenario_run("rank_gated_collective")  # submitted once, waited ready
                    run.pid(rank), run.truth, run.job_id, run.state_dir, run.output()
                A job needs 10-20 s alone to import torch and reach its hang on 2 cores, so
                jobs should start together: at its first use the fixture submits every
                scenario that a selected test names, by `@pytest.mark.scenario("a", "b")` or
                by a parameter called `scenario` (or a literal `scenario_run("a")` in the
                test function). scenario_run.start("a", ...) submits more without waiting
                (no names: every scenario); scenarios no remaining test uses are not
                submitted. A job is cancelled as soon as the last collected test that uses
                it has run (a test that asks for it later anyway gets a new job, with a
                warning: declare it); the rest at the end of the session. Jobs whose truth
                says "cpu_bound" are parked (SIGSTOP) between the tests that use them and
                resumed (SIGCONT) when a test asks for them: parked, they leave the CPU to
                the rest of the suite.
                Test modules that use scenario jobs run before the others.
py_spy          path of the py-spy binary (the venv's first).

Before any test that is marked `cluster` or uses `py_spy` runs, the session stops with a
message saying what to install when py-spy is missing or ptrace is not permitted.
"""

from __future__ import annotations

import inspect
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
CLUSTER_SCRIPT = REPO_ROOT / "deploy" / "local-cluster" / "cluster"
CLUSTER_NODES = 4
#: A scenario job needs 10-20 s alone; with the ~28 suite scenarios starting at once on 2 cores
#: (112 ranks importing torch), the first one was still importing after 180 s in two fresh-clone
#: CIs of session 34 (a bound on waiting, not a timing assertion).
SCENARIO_READY_TIMEOUT = 420.0

if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from scenarios.launch import ScenarioError, ScenarioRun, load_truth, scenario_names, submit
from support.cluster_health import restart_dead_slurmds

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
    # the tests that will run (after -k/-m deselection): how many use each scenario
    session.config.stash[_USES_KEY] = ScenarioUses(session.items)
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
    restart_dead_slurmds(CLUSTER_SCRIPT, CLUSTER_NODES)  # a node daemon that died since
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

#: A parked control whose phase ended meanwhile (silent_compute) logs its catch-up step within
#: this after SIGCONT (a bound on waiting, not a timing assertion).
SETTLE_TIMEOUT = 20.0
_SCENARIO_CALL = re.compile(r"""\bscenario_run\(\s*["'](\w+)["']\s*\)""")


class ScenarioUses:
    """Which collected tests still to run use each scenario (counted once per test)."""

    def __init__(self, items: Iterable[pytest.Item]) -> None:
        self.remaining: Counter[str] = Counter()
        for item in items:
            self.remaining.update(scenarios_of(item))

    def finished(self, item: pytest.Item) -> None:
        self.remaining.subtract(scenarios_of(item))

    def wanted(self, name: str) -> bool:
        return self.remaining[name] > 0


_USES_KEY = pytest.StashKey[ScenarioUses]()
_JOBS_KEY = pytest.StashKey["ScenarioJobs"]()


class ScenarioJobs:
    """Each scenario job is submitted at most once per session and shared by every test."""

    def __init__(self, base_dir: Path, ready_timeout: float = SCENARIO_READY_TIMEOUT,
                 uses: ScenarioUses | None = None) -> None:
        self.base_dir = base_dir
        self.ready_timeout = ready_timeout
        self.uses = uses
        self._runs: dict[str, ScenarioRun] = {}
        self._failures: dict[str, str] = {}
        self._ready: set[str] = set()
        self._released: set[str] = set()
        self._parked: dict[str, tuple[float, list[int]]] = {}  # name -> (since, pids)
        self._in_use: set[str] = set()
        self._uncancelled: list[ScenarioRun] = []
        self._submitted: Counter[str] = Counter()
        self._cpu_s: dict[str, float] = {}

    def start(self, *names: str) -> None:
        """Submit the named scenarios (all when none are named) not running yet; no waiting.
        A scenario that no remaining test uses is not submitted."""
        for name in names or tuple(scenario_names()):
            if name in self._runs or name in self._failures or name in self._released:
                continue
            if self.uses is not None and not self.uses.wanted(name):
                continue
            self._submit(name)

    def _submit(self, name: str) -> None:
        again = self._submitted[name]  # a job submitted again gets a fresh state directory
        state_dir = self.base_dir / (f"{name}.{again}" if again else name)
        self._submitted[name] += 1
        try:
            self._runs[name] = submit(name, state_dir)
        except ScenarioError as error:
            self._failures[name] = str(error)

    def __call__(self, name: str) -> ScenarioRun:
        """The scenario's job once every rank is in its hang; fails the test otherwise."""
        if name in self._released:
            warnings.warn(f"scenario {name!r} was cancelled after its last declared use and is "
                          "submitted again: declare it with @pytest.mark.scenario", stacklevel=2)
            self._released.discard(name)
            self._ready.discard(name)
            self._runs.pop(name, None)
        if name not in self._runs and name not in self._failures:
            self._submit(name)
        if name in self._failures:
            pytest.fail(self._failures[name], pytrace=False)
        run = self._runs[name]
        self._in_use.add(name)
        self._resume(name)
        if name not in self._ready:
            try:
                run.wait_ready(self.ready_timeout)
            except ScenarioError as error:
                restarted = restart_dead_slurmds(CLUSTER_SCRIPT, CLUSTER_NODES)
                if not restarted:
                    self._failures[name] = str(error)
                    pytest.fail(str(error), pytrace=False)
                # a node daemon died under the job (seen once: glibc's abort in a slurmd during
                # the start burst): the job is lost, the node back; one more try, said so
                warnings.warn(f"scenario {name!r}: slurmd of {', '.join(restarted)} had died and "
                              f"was restarted; the job is submitted again ({error})", stacklevel=2)
                run = self._retry(name)
            self._ready.add(name)
        return run

    def _retry(self, name: str) -> ScenarioRun:
        """Cancel the scenario's job and wait for a new one (a failure fails the test)."""
        old = self._runs.pop(name)
        subprocess.run(["scancel", old.job_id], capture_output=True, timeout=60, check=False)
        self._submit(name)
        if name in self._failures:
            pytest.fail(self._failures[name], pytrace=False)
        run = self._runs[name]
        try:
            run.wait_ready(self.ready_timeout)
        except ScenarioError as error:
            self._failures[name] = str(error)
            pytest.fail(str(error), pytrace=False)
        return run

    def runs(self) -> dict[str, ScenarioRun]:
        return dict(self._runs)

    def after_test(self) -> None:
        """After each test: cancel the jobs no remaining test uses, park the busy ones."""
        self._in_use.clear()
        for name in list(self._runs):
            if self.uses is not None and not self.uses.wanted(name):
                self._release(name)
            elif (name not in self._parked and _is_busy(self._runs[name].truth)
                  and self._reported(name)):
                self._park(name)

    def cancel_all(self) -> None:
        for name in list(self._runs):
            self._release(name)
        for run in self._uncancelled:
            subprocess.run(["scancel", run.job_id], capture_output=True, timeout=300, check=False)

    def summary(self) -> str:
        parked = ", ".join(sorted(n for n in self._cpu_s if _is_busy(load_truth(n))))
        return (f"scenario jobs: {sum(self._submitted.values())} submitted, their ranks used "
                f"{sum(self._cpu_s.values()):.0f} CPU-s (read before each was cancelled; "
                f"parked between uses: {parked or 'none'})")

    # -- cancel, park and resume

    def _release(self, name: str) -> None:
        run = self._runs.pop(name)
        self._ready.discard(name)
        self._released.add(name)
        self._cpu_s[name] = self._cpu_s.get(name, 0.0) + sum(
            _cpu_seconds(pid) for pid in _local_tree(_rank_pids(run)))
        for pid in self._parked.pop(name, (0.0, []))[1]:
            _signal(pid, signal.SIGCONT)  # a stopped rank would not see SIGTERM, only SIGKILL
        try:
            run.cancel()
        except (OSError, subprocess.TimeoutExpired):
            self._uncancelled.append(run)  # scancel again at the end, with more time

    def _reported(self, name: str) -> bool:
        """Every rank wrote its ready file (read without waiting: a job started ahead of its
        first test is parked too; that test's wait_ready runs after SIGCONT)."""
        run = self._runs[name]
        return name in self._ready or len(run.rank_records()) == int(run.truth["world_size"])

    def _park(self, name: str) -> None:
        pids = _local_tree(_rank_pids(self._runs[name]))
        for pid in pids:
            _signal(pid, signal.SIGSTOP)
        self._parked[name] = (time.time(), pids)

    def _resume(self, name: str) -> None:
        since, pids = self._parked.pop(name, (0.0, []))
        run = self._runs.get(name)
        period = run.truth.get("progress_period_s") if run is not None else None
        caught_up = run is not None and period and int(since // period) != int(time.time() // period)
        before = _last_steps(run) if caught_up else {}
        for pid in pids:
            _signal(pid, signal.SIGCONT)
        if caught_up and run is not None:
            # Its phases end on the wall clock: one ended while it was stopped, so every rank
            # ends its phase now (an all_reduce and a log line), not 30 s from now as in a job
            # never stopped. Let that pass before a test looks at the job.
            deadline = time.monotonic() + SETTLE_TIMEOUT
            while time.monotonic() < deadline and not all(
                    step > before.get(rank, -1) for rank, step in _last_steps(run).items()):
                time.sleep(0.2)
            time.sleep(0.5)


def _is_busy(truth: dict[str, object]) -> bool:
    return truth.get("cpu_bound") is True


def _last_steps(run: ScenarioRun) -> dict[int, int]:
    """Each rank's last step in the job's log (a control's progress_pattern), -1 if none yet."""
    steps = dict.fromkeys(range(int(run.truth["world_size"])), -1)
    for rank, step in re.findall(str(run.truth["progress_pattern"]), run.output()):
        steps[int(rank)] = max(steps.get(int(rank), -1), int(step))
    return steps


def _rank_pids(run: ScenarioRun) -> list[int]:
    """The live ranks of a job that run on this host (the emulated cluster's case)."""
    host = socket.gethostname()
    return [int(r["pid"]) for r in (run.ready or run.rank_records()).values()
            if r.get("host") == host and r.get("role") != "dead"]


def _local_tree(pids: list[int]) -> list[int]:
    """The pids and their descendants (DataLoader workers, spawned children)."""
    tree: list[int] = []
    todo = list(pids)
    while todo:
        pid = todo.pop()
        if pid in tree:
            continue
        tree.append(pid)
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                todo += [int(c) for c in
                         Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            continue
    return tree


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def scenarios_of(item: pytest.Item) -> list[str]:
    """Scenario names one test uses: marker `scenario`, a parameter `scenario`, or a literal
    `scenario_run("name")` in the test function's source."""
    names: list[str] = []
    for mark in item.iter_markers("scenario"):
        names.extend(mark.args)
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "scenario" in callspec.params:
        names.append(callspec.params["scenario"])
    function = getattr(item, "function", None)
    if function is not None and "scenario_run" in getattr(item, "fixturenames", ()):
        names.extend(_literal_scenarios(function))
    return list(dict.fromkeys(names))


def _literal_scenarios(function: object) -> list[str]:
    try:
        source = inspect.getsource(function)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return []
    return _SCENARIO_CALL.findall(source)


def scenarios_wanted(items: list[pytest.Item]) -> list[str]:
    """Scenario names the given tests use (see scenarios_of)."""
    return list(dict.fromkeys(name for item in items for name in scenarios_of(item)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Modules whose tests use scenario jobs run first (each module's tests stay together and
    in order): the jobs are cancelled after their last use, so the other modules, and the
    unit tests, run without ~80 torch ranks (~16 GB) on the machine."""
    uses_scenarios = {item.nodeid.split("::")[0] for item in items if scenarios_of(item)}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in uses_scenarios)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield
    uses = item.config.stash.get(_USES_KEY, None)
    if uses is not None:
        uses.finished(item)
    jobs = item.config.stash.get(_JOBS_KEY, None)
    if jobs is not None:
        try:
            jobs.after_test()
        except (OSError, subprocess.SubprocessError, ValueError, KeyError) as error:
            warnings.warn(f"scenario jobs after {item.nodeid}: {error!r}", stacklevel=1)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    jobs = terminalreporter.config.stash.get(_JOBS_KEY, None)
    if jobs is not None:
        terminalreporter.write_line(jobs.summary())


@pytest.fixture(scope="session")
def scenario_run(request: pytest.FixtureRequest, local_cluster: dict[str, str],
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScenarioJobs]:
    uses = request.config.stash.get(_USES_KEY, None)
    jobs = ScenarioJobs(tmp_path_factory.mktemp("scenarios"), uses=uses)
    request.config.stash[_JOBS_KEY] = jobs
    try:
        jobs.start(*scenarios_wanted(request.session.items))
        yield jobs
    finally:
        jobs.cancel_all()

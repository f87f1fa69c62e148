"""Fault campaign on the real local cluster (issue 12): each fault is a test and a row of
docs/reliability.md's "Fault campaign" table (fault / what slurmdiag did / what was kept).

The jobs here are light: plain Python ranks under srun (no torch), blocked in a read as a hung
collective is, so a test costs a few MB per rank."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.users import other_user
from support.webhook import WebhookServer
from test_watch import write_config

from slurmdiag.api import collect_snapshot
from slurmdiag.assemble import node_from_outcome
from slurmdiag.options import AttachOptions
from slurmdiag.transport.collect import PAYLOAD_ENV
from slurmdiag.transport.srun import SrunTransport

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
PY_SPY = Path(sys.prefix) / "bin" / "py-spy"
STEP = "slurmdiag-collect"
RANK_CODE = ("import os, sys; d = sys.argv[1]; "
             "open(d + '/ready' + os.environ['SLURM_PROCID'], 'w').write(str(os.getpid())); "
             "os.read(os.pipe()[0], 1)")


class LightJob:
    """A running job: one plain Python rank per node, blocked in a read."""

    def __init__(self, job_id: str, ready_dir: Path, nodes: int) -> None:
        self.job_id, self.ready_dir, self.size = job_id, ready_dir, nodes

    def pids(self) -> dict[int, int]:
        return {r: int((self.ready_dir / f"ready{r}").read_text()) for r in range(self.size)}

    def nodes(self) -> list[str]:
        listing = subprocess.run(["squeue", "-h", "-j", self.job_id, "-o", "%N"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        return subprocess.run(["scontrol", "show", "hostnames", listing], capture_output=True,
                              text=True, check=True).stdout.split()

    def cancel(self) -> None:
        subprocess.run(["scancel", self.job_id], check=False)


def submit_light(ready_dir: Path, nodes: int = 2, rank_args: str = "", exports: str = "") -> LightJob:
    ready_dir.mkdir(parents=True, exist_ok=True)
    ready_dir.chmod(0o755)
    script = ready_dir / "job.sh"
    script.write_text(
        "#!/bin/sh\n" + exports +
        f"srun --ntasks-per-node=1 {sys.executable} -c \"{RANK_CODE}\" {ready_dir} {rank_args}\n"
    )
    job_id = subprocess.run(["sbatch", "--parsable", f"-N{nodes}", "-J", "slurmdiag-fault",
                             "-o", str(ready_dir / "out"), str(script)],
                            capture_output=True, text=True, check=True).stdout.strip()
    job = LightJob(job_id, ready_dir, nodes)
    deadline = time.monotonic() + 90
    while not all((ready_dir / f"ready{r}").exists() and (ready_dir / f"ready{r}").read_text()
                  for r in range(nodes)):
        if time.monotonic() > deadline:
            job.cancel()
            out = ready_dir / "out"
            pytest.fail(f"job {job_id} not ready: {out.read_text() if out.exists() else ''}")
        time.sleep(0.2)
    return job


@pytest.fixture
def light_job(local_cluster, tmp_path: Path) -> Iterator[LightJob]:
    job = submit_light(tmp_path / "job")
    try:
        yield job
    finally:
        job.cancel()


def proc_state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def processes_of_step(job_id: str) -> list[tuple[int, str]]:
    """(pid, comm) of every live process carrying the collector's source or its tools' marker
    in an environment of this job: the collector, py-spy and strace it started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        ours = any(v.startswith((PAYLOAD_ENV.encode() + b"=", b"SLURMDIAG_COLLECTOR=1"))
                   for v in environ)
        if ours and f"SLURM_JOB_ID={job_id}".encode() in environ and proc_state(int(entry.name)) != "Z":
            found.append((int(entry.name), comm))
    return found


def steps_of(job_id: str) -> str:
    return subprocess.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i %j"],
                          capture_output=True, text=True, check=False).stdout


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def start_attach(job: LightJob, out: Path, strace_s: float) -> subprocess.Popen:
    """`slurmdiag attach` in the background: 3 samples 1 s apart, strace alongside. Ctrl-C as
    a terminal sends it: a suite started in the background of a shell without job control
    inherits SIGINT ignored (and so would slurmdiag), so the child gets it back."""
    return subprocess.Popen(
        [sys.executable, "-c", CLI_WITH_CTRL_C, "attach", job.job_id, "--samples", "3",
         "--interval", "1", "--strace", str(strace_s), "--timeout", "40", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)


# `python -m slurmdiag.cli`, with Ctrl-C's KeyboardInterrupt even where SIGINT came ignored
CLI_WITH_CTRL_C = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'slurmdiag'; runpy.run_module('slurmdiag.cli', run_name='__main__')"
)


def wrapper(path: Path, body: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    path.parent.chmod(0o755)
    return str(path)


# ---------------------------------------------------------------- secrets never leave the controller

def test_step_environment_carries_no_controller_secret(light_job, tmp_path, monkeypatch):
    # GIVEN the controller's environment holds a webhook URL and a token
    monkeypatch.setenv("SLURMDIAG_WEBHOOK_URL", "https://hooks.example/T0/B0/SECRET-webhook")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_SECRET-token")
    # AND the node's interpreter is a wrapper that records the step task's own environment
    seen = tmp_path / "seen"
    seen.mkdir()
    python = wrapper(tmp_path / "bin" / "python-recording",
                     f'cat /proc/$$/environ > {seen}/env.$SLURMD_NODENAME\n'
                     'exec /usr/bin/python3 "$@"\n')
    nodes = light_job.nodes()
    # WHEN the collector is fanned out
    fanout = SrunTransport().collect(
        light_job.job_id, nodes,
        AttachOptions(samples=1, strace_s=0, timeout_s=30, node_python=python))
    # THEN every node answered, and no task of the step got either secret
    assert {n: o.status for n, o in fanout.nodes.items()} == dict.fromkeys(nodes, "ok")
    for node in nodes:
        environ = (seen / f"env.{node}").read_bytes()
        assert b"SECRET" not in environ, node
        assert b"PATH=" in environ and f"SLURM_JOB_ID={light_job.job_id}".encode() in environ


def test_rank_secrets_are_masked_on_the_node(local_cluster, tmp_path):
    # GIVEN ranks with a token on their command line, in a URL and in an NCCL variable
    job = submit_light(tmp_path / "job", rank_args="--hf_token=hf_SECRET --data "
                       "https://me:pw-SECRET@store.example/x",
                       exports="export NCCL_IB_Token=SECRET-nccl NCCL_DEBUG=WARN\n")
    try:
        # WHEN attached
        snapshot, _ = collect_snapshot(
            job.job_id, AttachOptions(samples=1, strace_s=0, timeout_s=30))
    finally:
        job.cancel()
    ranks = [r for _, r in snapshot.all_ranks()]
    assert len(ranks) == 2
    # THEN the values are masked, the rest is intact, and the variable did not leave
    for rank in ranks:
        assert rank.cmdline[-3:] == ("--hf_token=***", "--data", "https://me:***@store.example/x")
        assert rank.env.get("NCCL_DEBUG") == "WARN" and "NCCL_IB_Token" not in rank.env
    assert "SECRET" not in snapshot.to_json()


# ---------------------------------------------------------------- interrupted attach

@pytest.mark.parametrize(("sig", "during"), [(signal.SIGINT, "strace"), (signal.SIGTERM, "sampling")])
def test_interrupted_attach_keeps_what_came_and_leaves_nothing(light_job, tmp_path, sig, during):
    # GIVEN an attach running, caught while strace holds the ranks, or while py-spy samples them
    out = tmp_path / "out"
    attach = start_attach(light_job, out, strace_s=5)
    try:
        if during == "strace":
            wait_for(lambda: any(c == "strace" for _, c in processes_of_step(light_job.job_id)),
                     40, "strace under the collector")
        else:  # 3 samples 1 s apart: py-spy runs for ~50 ms each second
            wait_for(lambda: processes_of_step(light_job.job_id), 40, "the collectors")
            time.sleep(1.2)
        # WHEN Ctrl-C (or SIGTERM) reaches slurmdiag
        attach.send_signal(sig)
        _, stderr = attach.communicate(timeout=20)
    finally:
        if attach.poll() is None:
            attach.kill()
    # THEN it stops at once with exit 130 and one line saying so, no traceback
    assert attach.returncode == 130, stderr
    assert "error: interrupted" in stderr and "hint:" in stderr and "Traceback" not in stderr
    # AND the snapshot holds what the nodes sent (their partial documents), marked interrupted
    snapshot = json.loads((out / "snapshot.json").read_text())
    assert snapshot["options"]["interrupted"] is True
    assert (out / "report.html").exists()
    ok = [n for n in snapshot["nodes"] if n["status"] == "ok"]
    assert ok, [(n["name"], n["status"], n["message"]) for n in snapshot["nodes"]]
    assert any(r["pid"] in light_job.pids().values() for n in ok for r in n["ranks"])
    # AND no step, collector, py-spy or strace is left, and no rank is left stopped
    wait_for(lambda: STEP not in steps_of(light_job.job_id), 10, "the step to end")
    wait_for(lambda: not processes_of_step(light_job.job_id), 10, "the collectors to end")
    time.sleep(0.5)
    for pid in light_job.pids().values():
        assert proc_state(pid) not in ("T", "t", None), pid


# ---------------------------------------------------------------- the job changes under us

def test_rank_that_exits_between_listing_and_dumping(light_job, tmp_path):
    # GIVEN rank 1 exits after the collector listed it, just before py-spy reads it
    # (a py-spy that SIGKILLs rank 1 first, then runs the real py-spy)
    pyspy = wrapper(tmp_path / "bin" / "py-spy", (
        'for a; do [ "$prev" = --pid ] && pid=$a; prev=$a; done\n'
        'if [ -n "$pid" ] && tr "\\0" "\\n" < /proc/$pid/environ | grep -qx SLURM_PROCID=1; then\n'
        '  kill -9 $pid; sleep 0.3\nfi\n'
        f'exec {PY_SPY} "$@"\n'))
    pids = light_job.pids()
    # WHEN attached
    snapshot, _ = collect_snapshot(
        light_job.job_id, AttachOptions(samples=2, interval_s=0.3, strace_s=0.5, timeout_s=30,
                                        pyspy_paths=(pyspy,)))
    # THEN every node answered; rank 0 has its stacks; rank 1 is named, with why it has none
    assert {n.status for n in snapshot.nodes} == {"ok"}, [(n.name, n.message) for n in snapshot.nodes]
    ranks = {r.rank: r for _, r in snapshot.all_ranks()}
    assert ranks[0].samples and ranks[0].samples[0].threads
    assert 1 in ranks and ranks[1].pid == pids[1], sorted(ranks)
    gone = ranks[1]
    assert not any(s.threads for s in gone.samples)
    assert gone.errors or gone.state in ("Z", "X", None), gone


def test_job_that_ends_during_attach(light_job, tmp_path):
    # GIVEN an attach running
    out = tmp_path / "out"
    attach = start_attach(light_job, out, strace_s=2)
    try:
        wait_for(lambda: processes_of_step(light_job.job_id), 40, "the collectors")
        time.sleep(1.2)  # in the middle of the sampling
        # WHEN the job is cancelled under it
        light_job.cancel()
        _, stderr = attach.communicate(timeout=60)
    finally:
        if attach.poll() is None:
            attach.kill()
    # THEN attach ends with a documented exit code, no traceback, and writes what it had
    assert attach.returncode in (0, 6), stderr
    assert "Traceback" not in stderr and "internal error" not in stderr
    snapshot = json.loads((out / "snapshot.json").read_text())
    assert len(snapshot["nodes"]) == 2
    assert all(n["status"] == "ok" or n["message"] for n in snapshot["nodes"]), snapshot["nodes"]
    wait_for(lambda: not processes_of_step(light_job.job_id), 15, "the collectors to end")


# ---------------------------------------------------------------- tools and Slurm refuse

def test_pyspy_and_strace_not_permitted(light_job, tmp_path):
    # GIVEN py-spy and strace that run as another, unprivileged user: the kernel refuses them
    # ptrace on the ranks (real EPERM, real tools)
    user = other_user()
    drop = f"exec setpriv --reuid={user.uid} --regid={user.gid} --clear-groups"
    pyspy = wrapper(tmp_path / "bin" / "py-spy", f'{drop} {PY_SPY} "$@"\n')
    strace = wrapper(tmp_path / "bin" / "strace", f'{drop} /usr/bin/strace "$@"\n')
    nodes = light_job.nodes()
    # WHEN collected
    options = AttachOptions(samples=1, strace_s=0.5, timeout_s=30, pyspy_paths=(pyspy,),
                            strace_paths=(strace,))
    fanout = SrunTransport().collect(light_job.job_id, nodes, options)
    # THEN every node still answers with its ranks, and says plainly that ptrace was refused
    views = [node_from_outcome(fanout.nodes[n]) for n in nodes]
    assert {v.status for v in views} == {"ok"}
    for view in views:
        assert [r.rank for r in view.ranks] and all(r.state for r in view.ranks)
        text = " ".join(view.errors) + " ".join(e for r in view.ranks for e in r.errors)
        assert "ptrace" in text.lower() or "permission" in text.lower() or "not permitted" in text.lower(), text
    for pid in light_job.pids().values():
        assert proc_state(pid) not in ("T", "t", None)


def test_srun_refused_for_a_job_of_another_user(light_job, tmp_path):
    # GIVEN an operator account without rights on the job (root's)
    user = other_user()
    out = Path(tempfile.mkdtemp(prefix="slurmdiag-fault-"))
    os.chown(out, user.uid, user.gid)
    site = next(Path(sys.prefix).glob("lib/python3*/site-packages"))
    as_user = ["runuser", "-u", user.name, "--", "env", f"PYTHONPATH={REPO}:{site}",
               f"SLURM_CONF={os.environ.get('SLURM_CONF', '')}", "PATH=/usr/bin:/bin",
               "/usr/bin/python3"]
    try:
        # WHEN it attaches: the job's owner is compared with the caller before any step
        done = subprocess.run(
            [*as_user, "-m", "slurmdiag.cli", "attach", light_job.job_id,
             "--samples", "1", "--strace", "0", "--timeout", "20", "--out", str(out / "d")],
            capture_output=True, text=True, timeout=120, cwd=out, check=False)
        # THEN one line naming the owner and what is needed, exit 11, and no step was tried
        assert done.returncode == 11, done.stderr
        assert "Traceback" not in done.stderr and "hint:" in done.stderr
        assert "belongs to root" in done.stderr
        # AND WHEN its transport asks Slurm for the step all the same (a site whose owner
        # check cannot tell): Slurm's refusal is data per node, not a crash
        probe = (
            "import json\n"
            "from slurmdiag.assemble import node_from_outcome\n"
            "from slurmdiag.options import AttachOptions\n"
            "from slurmdiag.transport.srun import SrunTransport\n"
            f"nodes = {list(light_job.nodes())!r}\n"
            f"r = SrunTransport().collect({light_job.job_id!r}, nodes, "
            "AttachOptions(samples=1, strace_s=0, timeout_s=20))\n"
            "print(json.dumps([[v.status, v.message] for v in "
            "(node_from_outcome(r.nodes[n]) for n in nodes)]))\n"
        )
        done = subprocess.run([*as_user, "-c", probe], capture_output=True, text=True,
                              timeout=120, cwd=out, check=False)
        assert done.returncode == 0, done.stderr
        views = json.loads(done.stdout.strip().splitlines()[-1])
        assert {status for status, _ in views} == {"unreachable"}, views
        assert all("Unable to create step" in (message or "") for _, message in views), views
    finally:
        subprocess.run(["rm", "-rf", str(out)], check=False)


# ---------------------------------------------------------------- the watchdog killed mid-pass

def _watch_config(tmp_path: Path, webhook_url: str) -> Path:
    report_dir = tmp_path / "reports"
    report_dir.mkdir(exist_ok=True)
    return write_config(tmp_path / "config.toml", report_dir, "http://127.0.0.1:9/reports",
                        webhook_url)


def _watch(config: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "slurmdiag.cli", "watch", "--once",
                             "--config", str(config)], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, stderr = proc.communicate(timeout=240)
    return proc.returncode, stderr


@pytest.mark.parametrize("when", ["attach", "post"])
def test_watchdog_killed_mid_pass_neither_loses_nor_doubles_the_alert(scenario_run, tmp_path,
                                                                      when):
    # GIVEN a hung job and a real webhook receiver that holds its answer back 8 s
    hung = scenario_run("rank_gated_collective")
    with WebhookServer(delay_s=8.0) as hook:
        config = _watch_config(tmp_path, hook.url)
        check = subprocess.run([sys.executable, "-m", "slurmdiag.cli", "config", "check",
                                str(config)], capture_output=True, text=True, cwd=REPO, check=False)
        assert check.returncode == 0, check.stdout + check.stderr
        watch = _watch(config)
        # WHEN the watchdog is SIGKILLed during the attach (its step is in the job) or while
        # its post is in flight (the receiver got it, no answer yet)
        if when == "attach":
            wait_for(lambda: STEP in steps_of(hung.job_id), 120, "the watchdog's step")
        else:
            wait_for(lambda: hook.requests, 180, "the watchdog's post")
        watch.kill()
        watch.wait()
        assert len(hook.requests) == (0 if when == "attach" else 1)
        # AND the watchdog runs again, twice, with a prompt receiver
        hook.delay_s = 0.0
        for _ in range(2):
            code, stderr = _finish(_watch(config))
            assert code == 1, stderr
    # THEN the alert reached the receiver exactly once
    assert len(hook.requests) == 1, [r["body"]["job"]["id"] for r in hook.requests]
    assert hook.requests[0]["body"]["job"]["id"] == hung.job_id
    # AND no step of ours is left in the job (the killed run's ended at its collectors' deadline)
    wait_for(lambda: STEP not in steps_of(hung.job_id), 40, "no step left")


@pytest.mark.parametrize("tool", ["py-spy", "strace"])
def test_a_tool_killed_at_any_moment_never_leaves_the_rank_stopped(tool):
    # GIVEN a busy Python process (a rank), and the collector's own command of the tool
    rank = subprocess.Popen([sys.executable, "-c",
                             "import time\nwhile True: sum(range(1000)); time.sleep(0.001)"])
    argv = ([str(PY_SPY), "dump", "--json", "--pid", str(rank.pid)] if tool == "py-spy"
            else ["strace", "-c", "-f", "-p", str(rank.pid)])
    stopped = []
    try:
        time.sleep(0.3)
        # WHEN the tool is SIGKILLed (as the collector ends its tools on a signal or deadline)
        # 0 to 40 ms after it started, 80 times: before, during and after its ptrace attach
        for i in range(80):
            tool_proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep((i % 40) * 0.001)
            tool_proc.kill()
            tool_proc.wait()
            time.sleep(0.005)
            if proc_state(rank.pid) in ("T", "t"):
                stopped.append(i)
                os.kill(rank.pid, signal.SIGCONT)
    finally:
        rank.kill()
        rank.wait()
    # THEN the rank was never left stopped
    assert stopped == []

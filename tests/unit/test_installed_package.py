"""The job's own code installed into site-packages (pip install ., a console script,
`python -m pkg`) is the job's, not a library's; libraries stay libraries."""

from __future__ import annotations

import re

import pytest
from snapfactory import (
    C10D,
    C10D_LOGGER,
    SITE,
    STDLIB,
    TRAIN,
    node,
    rank,
    recorded,
    snap,
    stack,
    thread,
)

from slurmdiag.analysis import analyze
from slurmdiag.analysis.stacks import is_user_file, job_code, own_package_roots
from slurmdiag.post_mortem.logs import parse_rank_log
from slurmdiag.post_mortem.record import SlurmRecord
from slurmdiag.post_mortem.verdicts import postmortem_verdicts
from slurmdiag.report.render import build_view
from slurmdiag.slurm.sacct import AcctRecord
from slurmdiag.snapshot import Snapshot

PKG = f"{SITE}/trainkit"
STUB = "/opt/venv/bin/trainkit-train"


def test_recorded_console_script_job_names_the_packages_line():
    # GIVEN the real installed_package job: every frame of the job's code under site-packages,
    # run by pip's console-script stub; rank 2 polls for a marker, 0, 1, 3 in the all_reduce
    snapshot = recorded("installed_package.default.console_script")
    verdict = analyze(snapshot).verdicts[0]
    # THEN rank 2 is the straggler at the package's poll line, not at the stub's main() call
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (2,)
    assert verdict.sites[0].endswith("/site-packages/trainkit/shards.py:19")
    assert "bin/trainkit-train" not in verdict.summary
    # and the package is the job's only within the analysis of that job
    roots = own_package_roots(r for n in snapshot.nodes for r in n.ranks)
    assert {root.rsplit("/", 1)[1] for root in roots} == {"trainkit"}
    assert not is_user_file(next(iter(roots)) + "/shards.py")


def _moved(snapshot: Snapshot, into: str) -> Snapshot:
    """The recorded job with its scenario files moved into a site-packages package."""
    return Snapshot.from_json(re.sub(r'"/[^"]*/tests/scenarios/', f'"{into}/', snapshot.to_json()))


@pytest.mark.parametrize("name", ["store_wait.samples1.caught_awake",
                                  "cache_lock_barrier.default.file_lock",
                                  "module_lock_deadlock.default"])
def test_a_package_run_as_a_module_keeps_the_verdict_of_its_checkout(name):
    # GIVEN a recorded job and the same job with its program in an installed package (the
    # program's own frame included: `python -m trainpkg.prog`, as torchrun's workers run it)
    original = recorded(name)
    installed = _moved(original, f"{SITE}/trainpkg")
    before, after = analyze(original).verdicts[0], analyze(installed).verdicts[0]
    # THEN the same culprit, kind and line, in the installed file (store_wait: culprits 0-3 and
    # the waiting ranks' line when the package was a library; cache_lock_barrier: torch's line)
    assert (after.kind, after.culprit_ranks) == (before.kind, before.culprit_ranks)
    assert after.sites[0] == f"{SITE}/trainpkg/" + before.sites[0].partition("/tests/scenarios/")[2]


def _ranks(stacks):
    return snap(node("n1", *(rank(r, s, s) for r, s in enumerate(stacks))))


def _waiting(caller: str) -> tuple:
    return stack(f"all_reduce {C10D}:2501", f"wrapper {C10D_LOGGER}:83", caller,
                 f"main {PKG}/cli.py:30", f"<module> {STUB}:8")


def test_console_script_entry_claims_its_package_only():
    stub_stack = _waiting(f"train_step {PKG}/loop.py:28")
    roots = own_package_roots(_ranks([stub_stack]).nodes[0].ranks)
    assert roots == {PKG}


def test_a_script_of_the_job_calling_an_installed_library_leaves_it_a_library():
    # GIVEN train.py (outside site-packages) calling an unknown installed library that blocks
    blocked = stack(f"wait {STDLIB}/threading.py:320", f"fetch {SITE}/shardlib/client.py:88",
                    f"load {TRAIN}:44", f"main {TRAIN}:80", f"<module> {TRAIN}:90")
    waiting = stack(f"all_reduce {C10D}:2501", f"wrapper {C10D_LOGGER}:83",
                    f"train_step {TRAIN}:50", f"main {TRAIN}:80", f"<module> {TRAIN}:90")
    snapshot = _ranks([waiting, blocked, waiting, waiting])
    # THEN no package is the job's, and the culprit's site is the script's call
    assert own_package_roots(snapshot.nodes[0].ranks) == frozenset()
    verdict = analyze(snapshot).verdicts[0]
    assert verdict.culprit_ranks == (1,) and verdict.sites[0] == f"{TRAIN}:44"


def test_recorded_thin_script_job_names_the_packages_line():
    # GIVEN the real installed_package_script job: a thin train.py of the job's own (outside
    # site-packages) whose module level calls the installed package's main() on every rank
    snapshot = recorded("installed_package_script.default.thin_script")
    verdict = analyze(snapshot).verdicts[0]
    # THEN rank 2 is the straggler at the package's poll line, not at train.py's main() call
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (2,)
    assert verdict.sites[0].endswith("/site-packages/trainkit/shards.py:19")
    # (each task's package in a site-packages of its own: one package by name, four roots)
    roots = own_package_roots(r for n in snapshot.nodes for r in n.ranks)
    assert {root.rsplit("/", 1)[1] for root in roots} == {"trainkit"} and len(roots) == 4


def test_recorded_module_level_call_into_a_library_keeps_the_scripts_line():
    # GIVEN the real script_unknown_library job: a loop at module level; rank 2's module level
    # calls an unknown installed library (where it polls), the others' call _training
    snapshot = recorded("script_unknown_library.default.module_level_call")
    # THEN the library is not the job's code, and the site is the script's call
    assert own_package_roots(r for n in snapshot.nodes for r in n.ranks) == frozenset()
    verdict = analyze(snapshot).verdicts[0]
    assert verdict.kind == "straggler" and verdict.culprit_ranks == (2,)
    assert verdict.sites[0].endswith("tests/scenarios/script_unknown_library.py:53")


def _thin(*inner: str) -> tuple:
    return stack(*inner, f"main {PKG}/cli.py:30", f"<module> {TRAIN}:4")


def test_a_thin_script_claims_the_package_only_when_every_ranks_program_enters_it():
    waiting = _thin(f"all_reduce {C10D}:2501", f"wrapper {C10D_LOGGER}:83",
                    f"train_step {PKG}/loop.py:28")
    polling = _thin(f"sleep {STDLIB}/time.py:1", f"wait_for_export {PKG}/shards.py:19")
    assert own_package_roots(_ranks([waiting, waiting, polling, waiting]).nodes[0].ranks) == {PKG}
    # a rank whose module level enters torch (or the script's own helper) breaks the agreement
    direct = stack(f"all_reduce {C10D}:2501", f"wrapper {C10D_LOGGER}:83", f"<module> {TRAIN}:9")
    helper = stack(f"all_reduce {C10D}:2501", f"train_step {TRAIN}:50", f"<module> {TRAIN}:9")
    for other in (direct, helper):
        ranks = _ranks([other, waiting, polling, waiting]).nodes[0].ranks
        assert own_package_roots(ranks) == frozenset()
    # two packages by name, one a rank: none is the job's
    elsewhere = stack(f"main {SITE}/otherkit/cli.py:3", f"<module> {TRAIN}:4")
    assert own_package_roots(_ranks([waiting, elsewhere]).nodes[0].ranks) == frozenset()


def test_an_installed_librarys_thread_or_a_known_library_entry_claims_nothing():
    # a metrics library's own thread (threading's bootstrap first), a known library's entry
    # (torch's launcher run in-process), the stdlib's: none of them the job's
    helper = stack(f"_send {SITE}/metricslib/agent.py:40", f"run {STDLIB}/threading.py:982",
                   f"_bootstrap_inner {STDLIB}/threading.py:1045",
                   f"_bootstrap {STDLIB}/threading.py:1002")
    torch_entry = stack(f"main {SITE}/torch/distributed/run.py:900",
                        "_run_module_as_main <frozen runpy>:198")
    main = stack(f"train_step {TRAIN}:50", f"<module> {TRAIN}:90")
    r = rank(0, main, extra_threads=[thread(helper, name="agent", thread_id=2)])
    assert own_package_roots([r, rank(1, torch_entry)]) == frozenset()


def test_submitit_and_python_c_entries_claim_the_package_they_call():
    submitted = stack(f"wait_for_export {PKG}/shards.py:19", f"main {PKG}/cli.py:30",
                      f"__call__ {SITE}/submitit/core/utils.py:161",
                      f"process_job {SITE}/submitit/core/submission.py:65",
                      f"<module> {SITE}/submitit/core/_submit.py:11",
                      f"_run_code {STDLIB}/runpy.py:88",
                      f"_run_module_as_main {STDLIB}/runpy.py:198")
    dash_c = stack(f"main {SITE}/trainkit2/cli.py:30", "<module> <string>:1")
    roots = own_package_roots([rank(0, submitted), rank(1, dash_c)])
    assert roots == {PKG, f"{SITE}/trainkit2"}


def test_the_report_marks_the_installed_package_as_the_jobs_code():
    snapshot = recorded("installed_package.default.console_script")
    view = build_view(snapshot, analyze(snapshot), source_lines={})
    frames = [f for section in view.sections for row in section.ranks if row.detail
              for t in row.detail.threads for run in t.runs for f in run.frames]
    mine = {f.is_user for f in frames if "/site-packages/trainkit/" in f.location}
    assert mine == {True}
    with job_code(snapshot) as roots:
        root = min(roots)  # one a task: run_installed.sh gives each task its own prefix
        assert is_user_file(f"{root}/shards.py") and not is_user_file(f"{SITE}/torch/nn/f.py")
    assert not is_user_file(f"{root}/shards.py")  # outside the job's analysis: a library


CRASH_LOG = """\
1: Traceback (most recent call last):
1:   File "/opt/venv/bin/trainkit-train", line 8, in <module>
1:     sys.exit(main())
1:              ^^^^^^
1:   File "/opt/venv/lib/python3.11/site-packages/trainkit/cli.py", line 30, in main
1:     shards.refresh_index(shards.export_marker())
1:   File "/opt/venv/lib/python3.11/site-packages/trainkit/shards.py", line 24, in refresh_index
1:     return sum(1 for _ in marker.parent.glob("*.tar")) // per_rank
1:   File "/opt/venv/lib/python3.11/site-packages/torch/_tensor.py", line 41, in wrapped
1:     return f(*args, **kwargs)
1: ZeroDivisionError: integer division or modulo by zero
srun: error: node2: task 1: Exited with exit code 1
"""


def _dead_job(log: str) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """(culprits, sites) of the post-mortem's first verdict on a failed job with ``log``."""
    findings, tails, _ = parse_rank_log(log, "job.out")
    job = AcctRecord(job_id="7", step=None, state="FAILED", exit_code=1)
    verdict = postmortem_verdicts(SlurmRecord(job=job), findings, (), tails, 2)[0]
    return verdict.culprit_ranks, verdict.sites


def test_a_crash_in_the_installed_package_names_the_packages_line():
    # GIVEN a dead job's log: rank 1 raised inside its installed package, run by its stub
    # THEN the site is the package's line, not the stub's call nor torch's frame
    assert _dead_job(CRASH_LOG) == (
        (1,), ("/opt/venv/lib/python3.11/site-packages/trainkit/shards.py:24",))


THIN_SCRIPT_LOG = """\
1: Traceback (most recent call last):
1:   File "/workspace/train.py", line 4, in <module>
1:     main()
1:   File "/opt/venv/lib/python3.11/site-packages/trainkit/cli.py", line 30, in main
1:     shards.refresh_index(shards.export_marker())
1:   File "/opt/venv/lib/python3.11/site-packages/trainkit/shards.py", line 24, in refresh_index
1:     return sum(1 for _ in marker.parent.glob("*.tar")) // per_rank
1: ZeroDivisionError: integer division or modulo by zero
0: Traceback (most recent call last):
0:   File "/workspace/train.py", line 4, in <module>
0:     main()
0:   File "/opt/venv/lib/python3.11/site-packages/trainkit/cli.py", line 27, in main
0:     loss = loop.train_step(model, loop.batch(info.rank, step))
0:   File "/opt/venv/lib/python3.11/site-packages/trainkit/loop.py", line 28, in train_step
0:     dist.all_reduce(flat)
0:   File "/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 2501, in all_reduce
0:     work.wait()
0: RuntimeError: Connection closed by peer [10.0.0.2]:5000
srun: error: node2: task 1: Exited with exit code 1
"""


def test_a_crash_under_a_thin_script_names_the_packages_line_when_every_traceback_agrees():
    # GIVEN a dead job's log: train.py (the job's own, outside site-packages) calls the
    # installed package's main() at module level; rank 1 raised in it, rank 0 died after
    # THEN the site is the package's line, not train.py's call
    assert _dead_job(THIN_SCRIPT_LOG) == (
        (1,), ("/opt/venv/lib/python3.11/site-packages/trainkit/shards.py:24",))
    # AND when rank 0's traceback enters torch straight from the script, the package stays a
    # library: the site is the script's call
    direct = THIN_SCRIPT_LOG.replace(
        '0:   File "/opt/venv/lib/python3.11/site-packages/trainkit/cli.py", line 27, in main\n'
        "0:     loss = loop.train_step(model, loop.batch(info.rank, step))\n"
        '0:   File "/opt/venv/lib/python3.11/site-packages/trainkit/loop.py", line 28, in '
        "train_step\n0:     dist.all_reduce(flat)\n", "")
    assert direct != THIN_SCRIPT_LOG
    assert _dead_job(direct) == ((1,), ("/workspace/train.py:4",))

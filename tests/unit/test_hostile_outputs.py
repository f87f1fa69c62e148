"""Output files in places others control, and a full disk (issue 12 point 4)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_api import _fake_slurm, _nodes_answering, _unreachable

from slurmdiag import api, cli
from slurmdiag.analysis import analyze
from slurmdiag.errors import OutputFailed
from slurmdiag.options import AttachOptions
from slurmdiag.safeio import RefusedPath, atomic_write, open_private_file
from slurmdiag.snapshot import Snapshot

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "snapshots" / "synthetic_rank_gated.json"


def _snapshot() -> Snapshot:
    return Snapshot.from_json(FIXTURE.read_text(encoding="utf-8"))


def test_a_planted_tmp_symlink_does_not_overwrite_or_remode_the_victim(tmp_path: Path) -> None:
    # GIVEN an --out directory another user controls, with .snapshot.json.tmp -> a victim file
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    out = tmp_path / "out"
    out.mkdir()
    (out / ".snapshot.json.tmp").symlink_to(victim)
    (out / ".report.html.tmp").symlink_to(victim)
    snapshot = _snapshot()
    # WHEN the outputs are written there
    api.write_outputs(snapshot, out, analyze(snapshot), mode=0o644)
    # THEN the victim is untouched (content and mode), the outputs are regular files
    assert victim.read_text() == "precious\n"
    assert victim.stat().st_mode & 0o777 == 0o600
    for name in ("snapshot.json", "report.html"):
        written = out / name
        assert not written.is_symlink() and written.stat().st_mode & 0o777 == 0o644
    assert json.loads((out / "snapshot.json").read_text())["job"]["id"] == snapshot.job.id


def test_a_planted_final_symlink_is_replaced_not_followed(tmp_path: Path) -> None:
    # GIVEN snapshot.json planted as a link to a victim
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    target = tmp_path / "snapshot.json"
    target.symlink_to(victim)
    # WHEN it is written THEN the link itself is replaced by the new file
    atomic_write(target, "{}", 0o640)
    assert victim.read_text() == "precious\n"
    assert not target.is_symlink() and target.read_text() == "{}"


def test_private_files_refuse_planted_links(tmp_path: Path) -> None:
    # GIVEN the watchdog's lock/state file name planted as a link to a victim
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "lock").symlink_to(victim)
    # WHEN it is opened THEN refused, victim untouched; a fresh one is created 0600
    with pytest.raises(OSError):
        os.close(open_private_file(tmp_path / "lock"))
    assert victim.read_text() == "precious\n"
    fd = open_private_file(tmp_path / "fresh")
    os.close(fd)
    assert (tmp_path / "fresh").stat().st_mode & 0o777 == 0o600
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(RefusedPath):
        os.close(open_private_file(tmp_path / "fifo"))


@contextlib.contextmanager
def _small_tmpfs(path: Path, size: str = "64k") -> Iterator[Path]:
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          check=False, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)


def _fill(directory: Path) -> None:
    with contextlib.suppress(OSError), open(directory / "filler", "wb") as fh:
        while True:
            fh.write(b"\0" * 4096)
            fh.flush()


def test_a_full_disk_keeps_the_snapshot_and_says_where(tmp_path: Path) -> None:
    # GIVEN an output directory on a full file system
    with _small_tmpfs(tmp_path / "full") as full:
        _fill(full)
        snapshot = _snapshot()
        # WHEN the outputs are written there
        with pytest.raises(OutputFailed) as caught:
            api.write_outputs(snapshot, full / "out", analyze(snapshot))
        # THEN one clear error naming the place and the cause, the snapshot kept elsewhere
        message = caught.value.message
        assert "No space left on device" in message and str(full / "out") in message
        kept = caught.value.kept
        assert kept is not None and kept in message
        try:
            assert json.loads(Path(kept).read_text())["job"]["id"] == snapshot.job.id
            assert Path(kept).stat().st_mode & 0o777 == 0o600
        finally:
            os.unlink(kept)
        # and no temporary file is left behind
        assert sorted(p.name for p in (full / "out").iterdir()) == []


@pytest.mark.parametrize("as_json", [True, False])
def test_attach_on_a_full_disk_exits_10_with_the_snapshot(
    monkeypatch, tmp_path: Path, capsys, as_json: bool
) -> None:
    # GIVEN an attach whose --out is on a full file system
    _fake_slurm(monkeypatch, _nodes_answering(_unreachable))
    with _small_tmpfs(tmp_path / "full") as full:
        _fill(full)
        argv = ["attach", "42", "--out", str(full / "d"), "--samples", "1", "--strace", "0"]
        # WHEN the CLI runs
        code = cli.main(argv + (["--json"] if as_json else []))
    out, err = capsys.readouterr()
    # THEN exit 10, one error line and a hint, no traceback, and the snapshot survives
    assert code == 10
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0]
    assert "hint:" in err and "Traceback" not in err
    kept = errors[0].rsplit("kept in ", 1)[-1]
    try:
        assert json.loads(Path(kept).read_text())["job"]["id"] == "42"
    finally:
        os.unlink(kept)
    if as_json:
        assert json.loads(out)["job"]["id"] == "42"


def test_the_watchdog_goes_on_over_a_full_report_dir(tmp_path: Path) -> None:
    # GIVEN two stuck jobs and a report_dir on a full file system; the attach writes its
    # outputs with the real write_outputs
    from support.webhook import WebhookServer
    from test_watchdog import HEALTHY, HUNG, World, hung_snapshot
    from test_watchdog import world as make_world

    world: World = make_world.__wrapped__(tmp_path)  # type: ignore[attr-defined]
    world.attach.snapshots[HEALTHY] = hung_snapshot
    kept: list[str] = []

    def attach(job_id: str, options: AttachOptions, *, out_dir: Path | None = None) -> Snapshot:
        snapshot = world.attach(job_id, options)
        if out_dir is not None:
            try:
                return api.write_outputs(snapshot, Path(str(out_dir)), analyze(snapshot))
            except OutputFailed as exc:
                kept.append(str(exc.kept))
                raise
        return snapshot

    with _small_tmpfs(tmp_path / "reports") as reports:
        _fill(reports)
        with WebhookServer() as chat:
            # WHEN one watch pass runs
            result = world.run(world.settings(chat.url, report_dir=reports), attach=attach)
    try:
        # THEN both jobs are alerted (without a report), each error says why and where the
        # snapshot went, and the pass completed (heartbeat written, exit 1: stuck jobs found)
        assert sorted(result.stuck_jobs) == sorted((HUNG, HEALTHY))
        assert len(chat.delivered) == 2
        assert len(result.errors) == 2
        assert all("No space left on device" in e and "kept in" in e for e in result.errors)
        assert result.exit_code == 1
        assert world.settings().watch.heartbeat_file.exists()
    finally:
        for path in kept:
            with contextlib.suppress(OSError):
                os.unlink(path)

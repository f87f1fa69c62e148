"""Shared /tmp is hostile (issue 12, point 3): the Flight Recorder hook and the collector never
write or read through what another user planted. A real second user plants the files."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.users import User, other_user

import slurmdiag.torch as hook
from slurmdiag.collector import flight, tools

SECRET = "root:$6$hash-that-must-never-leave:19000:0:99999:7:::\n"


@pytest.fixture
def user() -> User:
    return other_user()


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A root-only file (like /etc/shadow) a neighbour would like read or overwritten."""
    path = tmp_path / "victim"
    path.write_text(SECRET)
    path.chmod(0o600)
    return path


def _owned(path: Path, user: User, mode: int) -> Path:
    os.chown(path, user.uid, user.gid, follow_symlinks=False)
    if not path.is_symlink():
        path.chmod(mode)
    return path


# ---------------------------------------------------------------- the in-job hook (slurmdiag.torch)

def test_install_refuses_a_directory_a_neighbour_created(tmp_path, user, victim, monkeypatch):
    # GIVEN a neighbour created the Flight Recorder directory (world-writable) before the job,
    # with the registration's temporary file planted as a symlink to the user's file
    (tmp_path / "fr").mkdir()
    fr = _owned(tmp_path / "fr", user, 0o777)
    planted = fr / f"{os.getpid()}.json.tmp"
    planted.symlink_to(victim)
    monkeypatch.setenv("SLURMDIAG_FR_DIR", str(fr))
    monkeypatch.setattr(hook, "_installed", {})
    # WHEN the training process installs the hook
    with pytest.raises(hook.UnsafeDirectory) as refused:
        hook.install()
    # THEN it refuses, says why, and the victim file is untouched
    assert f"owned by uid {user.uid}" in refused.value.message
    assert refused.value.hint
    assert victim.read_text() == SECRET
    assert not (fr / f"{os.getpid()}.json").exists()


@pytest.mark.parametrize("kind", ["symlink", "mode 0755", "a file"])
def test_verified_dir_refuses_symlinks_open_modes_and_files(tmp_path, kind):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    real.chmod(0o700)
    target = tmp_path / "fr"
    if kind == "symlink":
        target.symlink_to(real)  # even to a directory of our own: never followed
    elif kind == "mode 0755":
        target.mkdir()
        target.chmod(0o755)
    else:
        target.write_text("")
    with pytest.raises(hook.UnsafeDirectory):
        hook.verified_dir(target, create=True)


def test_verified_dir_creates_0700_whatever_the_umask(tmp_path):
    old = os.umask(0)
    try:
        made = hook.verified_dir(tmp_path / "a" / "fr", create=True)
    finally:
        os.umask(old)
    assert os.stat(made).st_mode & 0o7777 == 0o700


def test_atomic_write_never_follows_a_planted_tmp_symlink(tmp_path, victim):
    # GIVEN the user's own private directory, in which a `<name>.tmp` symlink was left planted
    fr = hook.verified_dir(tmp_path / "fr", create=True)
    (fr / "123.json.tmp").symlink_to(victim)
    (fr / "123.json").symlink_to(victim)
    # WHEN the hook writes its registration
    hook._atomic_write(fr / "123.json", b'{"pid": 123}')
    # THEN the victim is untouched; the file is new, 0600, and no temporary file is left
    assert victim.read_text() == SECRET
    written = fr / "123.json"
    assert not written.is_symlink() and written.read_bytes() == b'{"pid": 123}'
    assert os.stat(written).st_mode & 0o777 == 0o600
    assert sorted(p.name for p in fr.iterdir()) == ["123.json", "123.json.tmp"]


def test_atomic_write_refuses_once_the_directory_was_opened_up(tmp_path):
    fr = hook.verified_dir(tmp_path / "fr", create=True)
    fr.chmod(0o777)
    with pytest.raises(hook.UnsafeDirectory):
        hook._atomic_write(fr / "1.fr.json", b"{}")
    assert list(fr.iterdir()) == []


# ---------------------------------------------------------------- the node collector

@pytest.fixture
def rank(user: User) -> Iterator[int]:
    """A real process of the second user, standing for a hooked rank."""
    proc = subprocess.Popen(["sleep", "120"], user=user.uid, group=user.gid)
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def fr_dir(tmp_path: Path, user: User, rank: int) -> Path:
    """The rank's user's private Flight Recorder directory, with the rank registered."""
    fr = tmp_path / "fr"
    fr.mkdir()
    _owned(fr, user, 0o700)
    (fr / f"{rank}.json").write_text("{}")
    _owned(fr / f"{rank}.json", user, 0o600)
    return fr


def _collect(requests, rank, env, wait_s=0.3):
    entry = {"pid": rank, "rank": 0}
    flight.fr_collect(requests, {rank: entry}, {rank: env}, tools.Clock(30), wait_s)
    return entry["flight_recorder"]


def test_trigger_is_never_created_through_a_planted_symlink(fr_dir, rank, victim):
    # GIVEN the rank's user planted `<pid>.trigger` as a symlink to a root-only file
    (fr_dir / f"{rank}.trigger").symlink_to(victim)
    # WHEN the collector (root) asks for a dump
    request = flight.fr_request(rank, {"SLURMDIAG_FR_DIR": str(fr_dir)})
    # THEN the victim is neither truncated nor rewritten, and the request is an error
    assert victim.read_text() == SECRET
    assert request is not None and "not a regular file" in request["error"]


def test_symlinked_dump_to_a_root_file_is_not_read(fr_dir, rank, victim):
    # GIVEN a trigger was created, and the "dump" that appears is a symlink to a root-only file
    env = {"SLURMDIAG_FR_DIR": str(fr_dir)}
    request = flight.fr_request(rank, env)
    assert request is not None and request["error"] is None
    assert (fr_dir / f"{rank}.trigger").is_file()
    (fr_dir / f"{rank}.fr.json").symlink_to(victim)
    # WHEN the collector collects it
    result = _collect({rank: request}, rank, env)
    # THEN nothing of the file reaches the document; a note says why
    assert result["status"] == "refused"
    assert "symlink" in result["message"]
    assert "hash-that-must-never-leave" not in json.dumps(result)


def test_dump_of_another_owner_is_ignored_and_the_rank_users_is_read(fr_dir, rank, user):
    env = {"SLURMDIAG_FR_DIR": str(fr_dir)}
    request = flight.fr_request(rank, env)
    dump = fr_dir / f"{rank}.fr.json"
    dump.write_text('{"entries": []}')  # root's file, not the rank's user's
    result = _collect({rank: request}, rank, env)
    assert result["status"] == "refused" and "owned by uid 0" in result["message"]
    _owned(dump, user, 0o600)
    result = _collect({rank: request}, rank, env)
    assert result == {"status": "ok", "format": "json", "source": str(dump),
                      "text": '{"entries": []}'}


def test_a_fifo_dump_does_not_block(fr_dir, rank):
    env = {"SLURMDIAG_FR_DIR": str(fr_dir)}
    request = flight.fr_request(rank, env)
    os.mkfifo(fr_dir / f"{rank}.fr.json")
    result = _collect({rank: request}, rank, env)
    assert result["status"] == "refused" and "not a regular file" in result["message"]


def test_registry_directory_not_private_is_not_used(tmp_path, rank, user):
    # GIVEN the rank's registry directory is world-writable (or someone else's)
    fr = tmp_path / "fr"
    fr.mkdir()
    fr.chmod(0o777)
    (fr / f"{rank}.json").write_text("{}")
    request = flight.fr_request(rank, {"SLURMDIAG_FR_DIR": str(fr)})
    # THEN no trigger is created in it, and the reason is an error of that rank
    assert request is not None and request["error"].startswith("not asking for a dump")
    assert f"owned by uid 0, not by the rank's user (uid {user.uid})" in request["error"]
    assert not (fr / f"{rank}.trigger").exists()


def test_pytorch_dump_file_only_when_the_rank_user_owns_it(tmp_path, rank, user):
    # GIVEN a PyTorch dump file path (TORCH_FR_DUMP_TEMP_FILE + rank) written by another user
    prefix = tmp_path / "trace_"
    dump = Path(f"{prefix}0")
    dump.write_bytes(b"\x80\x04planted")
    env = {"TORCH_FR_DUMP_TEMP_FILE": str(prefix)}
    # WHEN collected THEN ignored with a note naming the owner
    result = _collect({}, rank, env)
    assert result["status"] == "refused"
    assert "owned by uid 0" in result["message"] and str(dump) in result["message"]
    # AND the rank user's own dump is read (bounded, base64)
    _owned(dump, user, 0o600)
    result = _collect({}, rank, env)
    assert result["status"] == "ok" and base64.b64decode(result["base64"]) == b"\x80\x04planted"


def test_read_owned_is_bounded(tmp_path):
    path = tmp_path / "big"
    with open(path, "wb") as fh:
        fh.truncate(1 << 30)  # sparse 1 GiB
    data, why = flight.read_owned(str(path), os.getuid(), 4096)
    assert why is None and len(data) == 4096


def test_the_hook_prepares_the_first_dump_in_its_own_thread(tmp_path):
    # GIVEN a process with the hook installed (torch's first dump imports torch._dynamo)
    import subprocess
    import sys

    code = (
        "import sys, time, slurmdiag.torch\n"
        "slurmdiag.torch.install(poll_s=0.05)\n"
        "deadline = time.time() + 120\n"
        "while 'torch._dynamo' not in sys.modules and time.time() < deadline:\n"
        "    time.sleep(0.1)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    env = {**os.environ, "SLURMDIAG_FR_DIR": str(tmp_path / "fr")}
    # WHEN it runs, before any dump was asked for
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180, env=env, check=False)
    # THEN the import happened in the hook's thread, so a dump during a hang is quick
    assert done.stdout.strip() == "True", done.stderr[-2000:]

"""Optional in-job hook: Flight Recorder dumps on demand (extra ``slurmdiag[torch]``).

One call in the training script, before ``init_process_group``::

    import slurmdiag.torch
    slurmdiag.torch.install()

starts a daemon thread that writes ``torch._C._distributed_c10d._dump_fr_trace_json()`` to a file
when a trigger file appears. ``slurmdiag attach --flight-recorder`` creates the trigger on every
node and collects the dumps. Nothing else is done in the job: no signal handlers, no sockets.

Files live in ``$SLURMDIAG_FR_DIR`` or ``/tmp/slurmdiag-fr-<uid>`` (mode 0700):
``<pid>.json`` registers the process, ``<pid>.trigger`` asks for a dump, ``<pid>.fr.json`` is it.
That directory sits in a shared place (``/tmp``), so it is trusted only when it is a real
directory (not a symlink), owned by the user, mode 0700 — checked with ``lstat`` before every
write; ``install()`` refuses one that is not (``UnsafeDirectory``). Files are written to a fresh
``mkstemp`` file (``O_EXCL|O_NOFOLLOW``) in that directory, then renamed over the target.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from slurmdiag.errors import MissingExtra, SlurmdiagError

DEFAULT_BUFFER_ENTRIES = "2000"
_installed: dict[str, Any] = {}


def registry_dir(environ: dict[str, str] | None = None, uid: int | None = None) -> Path:
    """Where hooked processes register; the collector computes the same path from /proc."""
    env = os.environ if environ is None else environ
    if env.get("SLURMDIAG_FR_DIR"):
        return Path(env["SLURMDIAG_FR_DIR"])
    return Path(f"/tmp/slurmdiag-fr-{os.getuid() if uid is None else uid}")


class UnsafeDirectory(SlurmdiagError):
    """The Flight Recorder directory is not the user's own private directory."""

    default_hint = (
        "remove it, or set SLURMDIAG_FR_DIR to a directory you own with mode 0700 "
        "(another user may have created it in a shared /tmp)"
    )


def verified_dir(directory: Path, create: bool = False) -> Path:
    """``directory`` if it is a real directory owned by us with mode 0700, else UnsafeDirectory.

    ``create``: make it first, exclusively (``mkdir`` 0700; its parents as usual). A directory
    that already exists is never changed, only checked, and a symlink is never followed.
    """
    if create:
        directory.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass
        else:
            os.chmod(directory, 0o700, follow_symlinks=False)  # whatever the umask took away
    try:
        info = os.lstat(directory)
    except OSError as exc:
        raise UnsafeDirectory(f"Flight Recorder directory {directory}: {exc.strerror}") from None
    problem = None
    if not stat.S_ISDIR(info.st_mode):
        problem = "is not a directory" + (" (a symlink)" if stat.S_ISLNK(info.st_mode) else "")
    elif info.st_uid != os.getuid():
        problem = f"is owned by uid {info.st_uid}, not by this user (uid {os.getuid()})"
    elif stat.S_IMODE(info.st_mode) != 0o700:
        problem = f"has mode {stat.S_IMODE(info.st_mode):04o}, not 0700"
    if problem:
        raise UnsafeDirectory(f"Flight Recorder directory {directory} {problem}; not using it")
    return directory


def _dump_json() -> bytes:
    """The Flight Recorder buffer as JSON, with each entry's Python stack when torch has it."""
    try:
        import torch._C._distributed_c10d as c10d
    except ImportError:
        raise MissingExtra("torch", "torch") from None
    if hasattr(c10d, "_dump_fr_trace"):
        # The pickle form carries the stack of every entry (the JSON form has none). It is
        # turned into JSON here, in the job's own process, so the controller never unpickles
        # data that came over the network.
        import pickle

        obj = pickle.loads(c10d._dump_fr_trace())
        return json.dumps(obj, default=_jsonable).encode()
    data = c10d._dump_fr_trace_json()  # type: ignore[attr-defined]
    return data if isinstance(data, bytes) else str(data).encode()


def _jsonable(value: Any) -> Any:
    if isinstance(value, (tuple, set)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value)


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all, in its verified directory, never through a symlink.

    The temporary file is new (``mkstemp``: ``O_CREAT|O_EXCL|O_NOFOLLOW``, mode 0600) and
    ``rename`` replaces a planted symlink at ``path`` itself, never the file it points to.
    """
    directory = verified_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _watch(trigger: Path, dump: Path, poll_s: float) -> None:
    # torch's first Flight Recorder dump of a process imports torch._dynamo (about 800 modules,
    # sympy among them: 2 s here, 26 s on a loaded 2-core node), longer than attach waits for a
    # dump. Imported once here, in this daemon thread, the dump asked for during a hang is quick.
    try:
        import torch._dynamo  # noqa: F401
    except Exception:  # noqa: BLE001, S110 - a warm-up only; never kill the training job
        pass
    while True:
        if os.path.lexists(trigger):
            try:
                _atomic_write(dump, _dump_json())
            except UnsafeDirectory:
                pass  # the directory was tampered with: write nothing there
            except Exception as exc:  # noqa: BLE001 - never kill the training job
                try:
                    _atomic_write(
                        dump, json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode()
                    )
                except Exception:  # noqa: BLE001, S110 - never kill the training job
                    pass
            try:
                trigger.unlink()
            except FileNotFoundError:
                pass
        time.sleep(poll_s)


def install(poll_s: float = 0.5) -> Path:
    """Enable Flight Recorder and dump it whenever slurmdiag asks; returns the registry file.

    Call it before ``torch.distributed.init_process_group`` so that the recorder buffer size
    (``TORCH_FR_BUFFER_SIZE``, default here 2000 entries) applies. Calling it twice is harmless.
    Raises ``UnsafeDirectory`` when the directory exists but is not this user's private one.
    """
    if "registration" in _installed:
        return _installed["registration"]
    try:
        import torch  # noqa: F401 - fail early with the extra's name when torch is absent
    except ImportError:
        raise MissingExtra("torch", "torch") from None
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", DEFAULT_BUFFER_ENTRIES)
    directory = verified_dir(registry_dir(), create=True)
    pid = os.getpid()
    trigger = directory / f"{pid}.trigger"
    dump = directory / f"{pid}.fr.json"
    registration = directory / f"{pid}.json"
    rank = os.environ.get("RANK") or os.environ.get("SLURM_PROCID")
    _atomic_write(
        registration,
        json.dumps({"pid": pid, "rank": rank, "trigger": str(trigger), "dump": str(dump)}).encode(),
    )
    thread = threading.Thread(
        target=_watch, args=(trigger, dump, poll_s), name="slurmdiag-fr", daemon=True
    )
    thread.start()
    _installed["registration"] = registration
    return registration

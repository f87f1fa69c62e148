"""Optional in-job hook: Flight Recorder dumps on demand (extra ``slurmdiag[torch]``).

One call in the training script, before ``init_process_group``::

    import slurmdiag.torch
    slurmdiag.torch.install()

starts a daemon thread that writes ``torch._C._distributed_c10d._dump_fr_trace_json()`` to a file
when a trigger file appears. ``slurmdiag attach --flight-recorder`` creates the trigger on every
node and collects the dumps. Nothing else is done in the job: no signal handlers, no sockets.

Files live in ``$SLURMDIAG_FR_DIR`` or ``/tmp/slurmdiag-fr-<uid>`` (mode 0700):
``<pid>.json`` registers the process, ``<pid>.trigger`` asks for a dump, ``<pid>.fr.json`` is it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from slurmdiag.errors import MissingExtra

DEFAULT_BUFFER_ENTRIES = "2000"
_installed: dict[str, Any] = {}


def registry_dir(environ: dict[str, str] | None = None, uid: int | None = None) -> Path:
    """Where hooked processes register; the collector computes the same path from /proc."""
    env = os.environ if environ is None else environ
    if env.get("SLURMDIAG_FR_DIR"):
        return Path(env["SLURMDIAG_FR_DIR"])
    return Path(f"/tmp/slurmdiag-fr-{os.getuid() if uid is None else uid}")


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
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def _watch(trigger: Path, dump: Path, poll_s: float) -> None:
    while True:
        if trigger.exists():
            try:
                _atomic_write(dump, _dump_json())
            except Exception as exc:  # noqa: BLE001 - never kill the training job
                _atomic_write(dump, json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
            try:
                trigger.unlink()
            except FileNotFoundError:
                pass
        time.sleep(poll_s)


def install(poll_s: float = 0.5) -> Path:
    """Enable Flight Recorder and dump it whenever slurmdiag asks; returns the registry file.

    Call it before ``torch.distributed.init_process_group`` so that the recorder buffer size
    (``TORCH_FR_BUFFER_SIZE``, default here 2000 entries) applies. Calling it twice is harmless.
    """
    if "registration" in _installed:
        return _installed["registration"]
    try:
        import torch  # noqa: F401 - fail early with the extra's name when torch is absent
    except ImportError:
        raise MissingExtra("torch", "torch") from None
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", DEFAULT_BUFFER_ENTRIES)
    directory = registry_dir()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
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

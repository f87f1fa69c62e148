"""What an attach is asked to do: ONE frozen options object with the one set of defaults.

The CLI builds it from its flags (argparse takes its defaults from here, so ``--help`` shows
them), ``slurmdiag.attach()`` from its keywords, the watchdog from its config; the transports
and the collector's arguments read it. An ``AttachOptions`` that exists is valid: bad values
raise ``UsageError`` when it is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from slurmdiag.errors import UsageError

# Where nodes keep the compiled collector (see transport/collect.py): node-local memory.
DEFAULT_NODE_CACHE = "/dev/shm"
TRANSPORTS = ("srun", "ssh")


@dataclass(frozen=True)
class SshSettings:
    """How the ssh transport logs in to the nodes."""

    user: str | None = None  # None: the current user
    port: int = 22
    key_filename: str | None = None  # None: the agent and ~/.ssh keys
    known_hosts: str | None = None  # None: ~/.ssh/known_hosts
    accept_new: bool = False  # trust unknown host keys on first use and remember them

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | SshSettings | None) -> SshSettings:
        """From ``attach(ssh_options={...})``'s dict (its keys are this class's fields)."""
        if values is None:
            return cls()
        if isinstance(values, SshSettings):
            return values
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UsageError(f"unknown ssh option(s): {', '.join(unknown)}",
                             hint=f"use: {', '.join(sorted(known))}")
        return cls(**values)


@dataclass(frozen=True)
class AttachOptions:
    """Every knob of an attach; the defaults here are the only ones (CLI, API and watchdog)."""

    samples: int = 3  # stack samples per rank
    interval_s: float = 1.0  # between samples
    strace_s: float = 2.0  # strace -c window per rank after the first sample; 0: off
    native: bool = False  # native frames too (slower)
    timeout_s: float = 30.0  # the global deadline
    concurrency: int = 8  # ranks a node's collector samples at once
    flight_recorder: bool = False  # ask hooked ranks for a Flight Recorder dump
    pyspy_paths: tuple[str, ...] = ()  # (): the controller's venv, then PATH
    strace_paths: tuple[str, ...] = ()  # (): likewise
    nvidia_smi_paths: tuple[str, ...] = ()  # (): nvidia-smi on the nodes' PATH
    node_python: str | None = None  # None: /usr/bin/python3 if 3.8+, else the controller's
    node_cache: str = DEFAULT_NODE_CACHE  # "": compile the collector on every attach
    # The most a node waits for every node's collector to start before its first sample (the
    # srun transport's go); 0: each node samples as soon as it starts.
    align_s: float = 2.0
    transport: str = "srun"  # one of TRANSPORTS
    ssh: SshSettings = field(default_factory=SshSettings)

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise UsageError("--samples must be at least 1")
        if self.interval_s < 0 or self.strace_s < 0 or self.timeout_s <= 0 or self.align_s < 0:
            raise UsageError("--interval and --strace must be >= 0 and --timeout > 0")
        if self.concurrency < 1:
            raise UsageError("the collector's concurrency must be at least 1")
        if self.transport not in TRANSPORTS:
            raise UsageError(f"unknown transport {self.transport!r}",
                             hint=f"use one of: {', '.join(TRANSPORTS)}")

    def recorded(self) -> dict[str, Any]:
        """What the snapshot's ``options`` keeps of them (its schema: docs/snapshot.md)."""
        values = asdict(self)
        return {key: values[key] for key in
                ("samples", "interval_s", "strace_s", "timeout_s", "native", "flight_recorder")}


DEFAULTS = AttachOptions()

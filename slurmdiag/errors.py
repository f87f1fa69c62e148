"""The one exception tree of slurmdiag; each error carries a hint and an exit code.

    SlurmdiagError                 exit 10  slurmdiag itself cannot go on
    ├── UsageError                 exit 2   bad arguments or job id form
    ├── JobNotFound                exit 3   Slurm does not know the job
    ├── JobNotRunning              exit 4   pending, suspended or finished: nothing to attach to
    ├── SlurmUnavailable           exit 5   scontrol/srun missing or the controller does not answer
    ├── TransportFailed            exit 6   the fan-out could not start on any node
    ├── ConfigError                exit 7   config file or setting invalid
    ├── MissingExtra               exit 8   an optional dependency is not installed
    ├── ParseError                 exit 9   input text or snapshot could not be understood
    └── NotPermitted               exit 11  the job is another user's: Slurm and the kernel refuse

A node that fails is *not* an exception: it is a status in the snapshot. These exceptions are for
the cases where no useful result can be produced at all. Exit code 1 is reserved for "the command
worked and found a problem" (the watchdog found stuck jobs).
"""

from __future__ import annotations


class SlurmdiagError(Exception):
    """Base of every error slurmdiag raises on purpose."""

    exit_code = 10
    default_hint = ""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint if hint is not None else self.default_hint


class UsageError(SlurmdiagError):
    exit_code = 2
    default_hint = "run 'slurmdiag --help' for the accepted arguments"


class JobNotFound(SlurmdiagError):
    exit_code = 3
    default_hint = "check the id with 'squeue --me'; finished jobs are only in 'sacct'"


class JobNotRunning(SlurmdiagError):
    exit_code = 4
    default_hint = "slurmdiag attaches to RUNNING jobs only"


class SlurmUnavailable(SlurmdiagError):
    exit_code = 5
    default_hint = "run on a login node with the Slurm client tools, or set SLURM_CONF"


class TransportFailed(SlurmdiagError):
    exit_code = 6
    default_hint = "try '--transport ssh' if steps cannot be added to this job"


class ConfigError(SlurmdiagError):
    exit_code = 7
    default_hint = "run 'slurmdiag config check FILE' to see every problem at once"


class MissingExtra(SlurmdiagError):
    exit_code = 8

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(
            f"the optional dependency '{module}' is not installed",
            hint=f"pip install 'slurmdiag[{extra}]'",
        )


class ParseError(SlurmdiagError):
    exit_code = 9
    default_hint = "please report this with the input attached"


class NotPermitted(SlurmdiagError):
    exit_code = 11
    default_hint = "run slurmdiag as the job's owner, or as root"

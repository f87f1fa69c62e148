"""The collector's arguments: one JSON object the controller always sends in full.

The collector has no defaults of its own: every option comes from the controller's
``collector_args`` (slurmdiag/transport/collect.py), which holds the one set of defaults. A
missing or wrong-typed argument is an ``ArgsError``, which main() turns into the document's
error (never a traceback): the controller and the collector disagree, and the document says so.
"""


class ArgsError(ValueError):
    """The collector's arguments are not what the controller sends."""


def _integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _strings(value):
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _pids(value):
    return isinstance(value, list) and all(_integer(item) for item in value)


# name -> (check, what it must be), in collector_args' order.
REQUIRED = (
    ("job_id", lambda v: isinstance(v, str) and v != "", "a non-empty string"),
    ("samples", _integer, "an integer"),
    ("interval", _number, "a number"),
    ("native", lambda v: isinstance(v, bool), "true or false"),
    ("strace_s", _number, "a number"),
    ("deadline_s", _number, "a number"),
    ("concurrency", _integer, "an integer"),
    ("pyspy", _strings, "a list of paths"),
    ("strace", _strings, "a list of paths"),
    ("nvidia_smi", _strings, "a list of paths"),
    ("flight_recorder", lambda v: isinstance(v, bool), "true or false"),
    ("fr_wait_s", _number, "a number"),
)
# Sent only when they apply: the node's name (else the collector's own, from SLURMD_NODENAME or
# the host name), and the knobs of tests and benchmarks (absent: what a real attach does).
OPTIONAL = (  # type: tuple
    ("node", lambda v: isinstance(v, str), "a string", None),
    ("exclude_pids", _pids, "a list of process ids", []),
    # "listpids" skips the /proc walks (tests, and sites whose stepd titles are not standard);
    # "walk" skips the sibling walk (tests).
    ("discovery", lambda v: v in ("auto", "walk", "listpids"), "auto, walk or listpids", "auto"),
    # bench/README.md measures the choices (see sample_stacks in main.py).
    ("strace_overlap", lambda v: v in ("first", "start", "off"), "first, start or off", "start"),
    # Seconds (from the collector's start) a node waits for the controller's go on its stdin
    # before its first round, so that every node's look starts at one moment; 0: no wait.
    ("align_s", _number, "a number", 0.0),
)


def read_options(args):
    """The collector's options from its decoded arguments; ArgsError names the first bad one."""
    if not isinstance(args, dict):
        raise ArgsError("arguments are not a JSON object")
    options = {}
    for name, check, what in REQUIRED:
        if name not in args:
            raise ArgsError(f"argument {name} missing (the controller sends every option)")
        if not check(args[name]):
            raise ArgsError(f"argument {name} must be {what}, not {args[name]!r:.60}")
        options[name] = args[name]
    for name, check, what, absent in OPTIONAL:
        value = args.get(name, absent)
        if name in args and not check(value):
            raise ArgsError(f"argument {name} must be {what}, not {value!r:.60}")
        options[name] = value
    options["samples"] = max(0, options["samples"])
    options["interval"] = max(0.0, float(options["interval"]))
    options["strace_s"] = max(0.0, float(options["strace_s"]))
    options["concurrency"] = max(1, options["concurrency"])
    options["deadline_s"] = max(1.0, float(options["deadline_s"]))
    options["fr_wait_s"] = float(options["fr_wait_s"])
    options["align_s"] = max(0.0, float(options["align_s"]))
    return options

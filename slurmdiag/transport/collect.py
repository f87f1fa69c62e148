"""What every transport runs on a node: the collector's payload, its arguments, the node command.

The transports (transport/base.py: srun, ssh, in-memory) differ in how they reach a node; the
program they start there, and the arguments it gets from the ``AttachOptions``, are built here.
"""

from __future__ import annotations

import binascii
import functools
import json
import marshal
import os
import re
import shutil
import sys
import zlib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from slurmdiag.options import AttachOptions

# A node program as the loader receives it: (package, ((module, source), ...)), the modules in
# the order they import each other and the program, run as the package's __main__, last.
Bundle = tuple[str, tuple[tuple[str, str], ...]]
COLLECTOR_PACKAGE = "slurmdiag.collector"
_SIBLING_IMPORT = re.compile(r"^from \.(\w+) import ", re.MULTILINE)


@functools.lru_cache(maxsize=4)
def package_bundle(package: str = COLLECTOR_PACKAGE) -> Bundle:
    """The modules of ``package`` its ``__main__`` needs, each after the siblings it imports.

    A module imports its siblings as ``from .name import ...`` (tests/unit/test_collector_package.py
    walks every import of the package): they are found here with a regular expression.
    """
    folder = resources.files(package)
    sources: dict[str, str] = {}
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in path:
            raise ValueError(f"{package}: circular import {' -> '.join((*path, name))}")
        if name in sources:
            return
        text = folder.joinpath(f"{name}.py").read_text()
        sources[name] = text
        for sibling in _SIBLING_IMPORT.findall(text):
            visit(sibling, (*path, name))
        order.append(name)

    visit("__main__", ())
    return package, tuple((name, sources[name]) for name in order)


@functools.lru_cache(maxsize=1)
def collector_bundle() -> Bundle:
    """The node collector: the package slurmdiag.collector, stdlib only, shipped with the command."""
    return package_bundle(COLLECTOR_PACKAGE)


def loader_text(source: str) -> str:
    """loader.py's code without its docstring, comments, blank lines and most of its
    indentation: every node decodes its argv at start-up, and the loader travels in it."""
    body = source.split('"""', 2)[2] if source.startswith('"""') else source
    lines = [line for line in body.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    # One space a level instead of four (the file has no multi-line strings to disturb).
    return "".join(
        " " * (depth // 4 + depth % 4) + line.lstrip(" ") + "\n"
        for line in lines
        for depth in [len(line) - len(line.lstrip(" "))]
    )


# The node command's -c program (see slurmdiag/collector/loader.py for its arguments and cache).
# Only the compressed source travels (~47 KB of base64, comments and docstrings cut): marshalled
# code would be twice that. Through srun the bundle travels in the environment (PAYLOAD_ENV; the
# argument is "-"): Python decodes every byte of its argv at start-up (~1.5 ms a node for 30 KB)
# but keeps the environment as bytes, read only when the cache misses.
@functools.lru_cache(maxsize=4)
def _collector_file(name: str) -> str:
    return resources.files(COLLECTOR_PACKAGE).joinpath(name).read_text()


COLLECTOR_LOADER = loader_text(_collector_file("loader.py"))


PAYLOAD_ENV = "SLURMDIAG_COLLECTOR_SOURCE"


# A line that holds only a comment (none of the node programs has such a line inside a
# multi-line string: tests/unit/test_node_command.py compares the syntax trees).
_COMMENT_LINE = re.compile(r"^[ \t]*#[^\n]*$", re.MULTILINE)


def without_comments(source: str) -> str:
    """``source`` with its comment-only lines left empty: the same code on the same line
    numbers (a node's traceback points at the file's own lines), in a payload ~7 % smaller,
    for ~1 ms (tokenize would cut the comments after code too, for 60 ms before srun starts)."""
    return _COMMENT_LINE.sub("", source)


# A docstring: a triple-quoted string opening a module, or the line after one that ends in ":"
# (a def or class header). The node programs' docstrings all have this shape, and none of them
# holds a triple quote (tests/unit/test_node_command.py compares the syntax trees).
_DOCSTRING = re.compile(r'((?:\A|:[ \t]*\n)[ \t]*)"""(.*?)"""', re.DOTALL)


def without_docstrings(source: str) -> str:
    """``source`` with each docstring made empty, its lines kept blank: the same code on the
    same line numbers, the collector's payload 27 % smaller (the node reads no docstring), for
    ~2 ms, won back by compressing less."""
    return _DOCSTRING.sub(lambda m: m.group(1) + '""' + "\n" * m.group(2).count("\n"), source)


@functools.lru_cache(maxsize=4)
def program_payload(program: str | Bundle) -> tuple[str, str]:
    """(hash of a node program's sources, the bundle compressed, as base64 text).

    ``program``: a bundle (package_bundle), or the source of a single-file program (run as
    ``__main__``, outside any package).
    """
    package, modules = ("", (("__main__", program),)) if isinstance(program, str) else program
    modules = tuple((name, without_docstrings(without_comments(text))) for name, text in modules)
    import hashlib  # here, on the payload's thread (api.collect_snapshot): OpenSSL's ~3 ms

    own = _collector_file("bundle.py")  # compiles, keeps and installs the modules on the node
    digest = hashlib.sha256(
        "\0".join([package, *(part for module in modules for part in module), own]).encode()
    ).hexdigest()[:20]
    data = marshal.dumps((package, modules, own), 4)  # version 4: what Python 3.4+ reads
    # Level 6: 0.6% larger than 9 and three times faster (~3 ms, paid before srun starts).
    return digest, binascii.b2a_base64(zlib.compress(data, 6), newline=False).decode()


def collector_payload() -> tuple[str, str]:
    """(hash of the collector's sources, its compressed bundle as base64 text)."""
    return program_payload(collector_bundle())


def default_tool_paths(name: str) -> tuple[str, ...]:
    """Where the controller sees a tool: its own venv (often on a shared file system), then PATH."""
    candidates = [str(Path(sys.prefix) / "bin" / name)]
    found = shutil.which(name)
    if found:
        candidates.append(found)
    return tuple(dict.fromkeys(candidates))


def collector_args(
    job_id: str, options: AttachOptions, node: str | None = None, *, aligned: bool = False
) -> dict[str, Any]:
    """The collector's arguments (collector/options.py). ``aligned``: the transport sends every
    node the go once all have started (srun's stdin), so each waits for it (``align_s``)."""
    # The collector must finish before the controller's deadline, leaving time for the
    # transport to start it and to carry its output back.
    margin = min(5.0, max(1.5, options.timeout_s * 0.2))
    args: dict[str, Any] = {
        "job_id": job_id,
        "samples": options.samples,
        "interval": options.interval_s,
        "native": options.native,
        "strace_s": options.strace_s,
        "deadline_s": max(2.0, options.timeout_s - margin),
        "concurrency": options.concurrency,
        "pyspy": list(options.pyspy_paths or default_tool_paths("py-spy")),
        "strace": list(options.strace_paths or default_tool_paths("strace")),
        "nvidia_smi": list(options.nvidia_smi_paths),
        "flight_recorder": options.flight_recorder,
        "fr_wait_s": min(10.0, max(1.0, options.timeout_s * 0.4)),
    }
    if node is not None:
        args["node"] = node
    if aligned and options.align_s > 0:
        args["align_s"] = options.align_s
    return args


def preferred_node_python() -> str:
    """The controller's own base interpreter, resolved (no venv, no pyenv/conda shim)."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(base)


SYSTEM_PYTHON = "/usr/bin/python3"


def _node_script(system_python: str) -> str:
    """The portable form's shell: $1 the controller's interpreter, $2 the loader, then the
    loader's arguments after the first. The system Python if the node has one, exec'd (no shell
    left behind), with the other interpreter as the loader's fallback."""
    return (
        'p=$1; l=$2; shift 2; [ -x "$p" ] || p=python3; '
        f'[ -x {system_python} ] && exec {system_python} -I -S -c "$l" "$p" "$@"; '
        'exec "$p" -I -S -c "$l" "" "$@"'
    )


def node_command(
    job_id: str,
    options: AttachOptions,
    node: str | None = None,
    *,
    portable: bool = True,
    source_in_env: bool = False,
    program: tuple[tuple[str, str], dict[str, Any]] | None = None,
    aligned: bool = False,
) -> list[str]:
    """The argv each node runs: the interpreter choice, the loader, the payload, the args.

    Unless ``options.node_python`` names one, a node runs the collector with its system Python,
    /usr/bin/python3, when that is 3.8 or later: it is on the node's own disk and starts fastest
    (no shared libpython; select, zlib and binascii built in), 1-4 ms of CPU a node less than
    a pyenv build. Else with the controller's own interpreter, resolved (a pyenv or conda shim
    would cost a shell and ~30 programs a node), else with python3 on the node's PATH.

    ``portable``: a shell picks the interpreter on the node. Otherwise the system Python is
    run directly, one program less a node; a node without it fails to start the step's task,
    and fan_out_srun runs the portable form there. ``source_in_env``: the compressed source is
    left to the environment (``PAYLOAD_ENV``, see node_environment). ``program``: another
    node program to run the same way instead of the collector, ((hash, payload), its args).
    """
    (digest, source), args = program or (
        collector_payload(), collector_args(job_id, options, node, aligned=aligned))
    rest = [options.node_cache, digest, "-" if source_in_env else source, json.dumps(args)]
    if options.node_python:
        return [options.node_python, "-I", "-S", "-c", COLLECTOR_LOADER, "", *rest]
    if not portable:
        return [SYSTEM_PYTHON, "-I", "-S", "-c", COLLECTOR_LOADER, preferred_node_python(), *rest]
    return ["/bin/sh", "-c", _node_script(SYSTEM_PYTHON), "slurmdiag-collector",
            preferred_node_python(), COLLECTOR_LOADER, *rest]


def node_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The step's environment: srun's (see srun_environment) and the collector's source."""
    return {**srun_environment(environ), PAYLOAD_ENV: collector_payload()[1]}


# The step's environment is an ALLOWLIST: srun passes its whole environment to every node's task,
# and the controller's may hold secrets (a webhook URL, tokens). Only what srun, the node's Python
# and its tools need: the search path, the user and locale, the Slurm client's configuration (not
# the SLURM_* variables of an allocation slurmdiag itself runs in: they would shape the step), and
# the nvidia-smi stand-in's fixture directory of the test suite.
SRUN_ENV_NAMES = frozenset([
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH",
    "SLURM_CONF", "SLURM_CLUSTERS", "SLURM_TIME_FORMAT", "SLURMDIAG_FAKE_NVSMI_DIR",
])
SRUN_ENV_PREFIXES = ("LC_",)


def srun_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The part of the controller's environment srun and the collector need (an allowlist)."""
    return {
        key: value
        for key, value in environ.items()
        if key in SRUN_ENV_NAMES or key.startswith(SRUN_ENV_PREFIXES)
    }


def controller_has_system_python() -> bool:
    """Nodes usually share the controller's OS image: when it has the system Python, so do they."""
    return os.access(SYSTEM_PYTHON, os.X_OK)

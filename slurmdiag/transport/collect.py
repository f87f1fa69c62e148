"""What every transport runs on a node: the collector's payload, its arguments, the node command.

The transports (transport/base.py: srun, ssh, in-memory) differ in how they reach a node; the
program they start there, and the arguments it gets from the ``AttachOptions``, are built here.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import json
import os
import shutil
import sys
import zlib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from slurmdiag.options import AttachOptions


@functools.lru_cache(maxsize=1)
def collector_source() -> str:
    """The stdlib-only node script, shipped inside the package and sent with the command."""
    return resources.files("slurmdiag.collector").joinpath("node.py").read_text()


# The node command's -c program; its arguments: the interpreter to re-run it with if this one is
# older than 3.8 or has no json module (python3-minimal alone), else python3 on PATH, or "" for
# neither; the cache directory (or ""); the collector's hash; its compressed source, or "-" when
# it is in the environment; the collector's args. The re-run takes this
# program and its arguments back from /proc/self/cmdline: `python -c` keeps them nowhere else.
#
# Compiling the collector's 70 KB of source costs ~15 ms of CPU a node, paid 32 times on the one
# host of an emulated cluster. So each node keeps the compiled code in a private directory
# (mode 0700, owned by the user; checked before every use, else not used) under a name made of
# the source hash and the interpreter's exact version: the first attach to a node compiles, the
# later ones load; the one that compiles keeps the newest 4 files of the same interpreter, ours
# included, and removes older versions' (and unfinished temporary files): a few versions used in
# turn (a watchdog and a newer CLI) do not evict each other. Only the compressed source travels
# (~30 KB): marshalled code would be twice that. Through srun the source travels in the
# environment (PAYLOAD_ENV; the argument is "-"): Python decodes every byte of its argv at
# start-up (~1.5 ms a node for 30 KB) but keeps the environment as bytes, read only when the
# cache misses. Both the loader and the collector use the posix module, not os: os.py imports
# _collections_abc, ~1 ms a node.
COLLECTOR_LOADER = """\
import sys,posix as os
def j():
 for m in ('_json','json'):
  try:
   __import__(m);return 1
  except ImportError:pass
if sys.version_info<(3,8) or not j():
 import os
 a=open('/proc/self/cmdline','rb').read().split(b'\\0')[:-1]
 for x in (sys.argv[1],'python3')if sys.argv[1] else ():
  try:os.execvp(x,[x]+a[1:5]+[b'']+a[6:])
  except OSError:pass
 sys.exit('slurmdiag: the collector needs Python 3.8+ with its json module, found '+sys.version.split()[0])
import marshal
r,h,z=sys.argv[2:5];del sys.argv[1:5]
u=os.getuid();d='%s/slurmdiag-%d'%(r,u);p='%s/%s-%s-%x'%(d,h,sys.implementation.cache_tag,sys.hexversion)
def ok():
 s=os.lstat(d);return s.st_uid==u and s.st_mode&0o170777==0o40700
c=None
if r:
 try:
  if ok():
   with open(p,'rb') as f:c=marshal.loads(f.read())
 except (OSError,ValueError,EOFError,TypeError):c=None
if c is None:
 import zlib,binascii
 if z=='-':z=os.environ.get(b'SLURMDIAG_COLLECTOR_SOURCE') or sys.exit('slurmdiag: the collector source is not in the environment')
 c=compile(zlib.decompress(binascii.a2b_base64(z)),'slurmdiag-collector','exec')
 if r:
  try:
   try:os.mkdir(d,0o700)
   except FileExistsError:pass
   if ok():
    q='%s.%d'%(p,os.getpid());f=os.open(q,os.O_WRONLY|os.O_CREAT|os.O_EXCL|os.O_NOFOLLOW,0o600)
    try:os.write(f,marshal.dumps(c))
    finally:os.close(f)
    os.rename(q,p);t=p[len(d)+1:].partition('-')[2];o=[]
    for n in os.listdir(d):
     if n.partition('.')[0].partition('-')[2]==t:
      try:o.append((os.stat(d+'/'+n).st_mtime,d+'/'+n))
      except OSError:pass
    for m,n in sorted(o)[:-4]:
     try:os.unlink(n)
     except OSError:pass
  except OSError:pass
exec(c,{'__name__':'__main__'})
"""


PAYLOAD_ENV = "SLURMDIAG_COLLECTOR_SOURCE"


@functools.lru_cache(maxsize=4)
def program_payload(text: str) -> tuple[str, str]:
    """(hash of a node program's source, its compressed source as base64 text)."""
    source = text.encode()
    digest = hashlib.sha256(source).hexdigest()[:20]
    # Level 6: 0.6% larger than 9 and three times faster (~3 ms, paid before srun starts).
    return digest, binascii.b2a_base64(zlib.compress(source, 6), newline=False).decode()


def collector_payload() -> tuple[str, str]:
    """(hash of the collector source, its compressed source as base64 text)."""
    return program_payload(collector_source())


def default_tool_paths(name: str) -> tuple[str, ...]:
    """Where the controller sees a tool: its own venv (often on a shared file system), then PATH."""
    candidates = [str(Path(sys.prefix) / "bin" / name)]
    found = shutil.which(name)
    if found:
        candidates.append(found)
    return tuple(dict.fromkeys(candidates))


def collector_args(job_id: str, options: AttachOptions, node: str | None = None) -> dict[str, Any]:
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
    (digest, source), args = program or (collector_payload(), collector_args(job_id, options, node))
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

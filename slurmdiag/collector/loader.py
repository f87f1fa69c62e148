"""The node command's program: loads a bundled node program and runs it (``python -I -S -c``).

The transport (slurmdiag/transport/collect.py, ``loader_source``) sends this file's code without
its comments and docstring as the ``-c`` program. Its arguments: the interpreter to re-run it with
if this one is older than 3.8 or has no json module (python3-minimal alone), else python3 on PATH,
or "" for neither; the cache directory (or ""); the bundle's hash; the bundle, or "-" when it is in
the environment (SLURMDIAG_COLLECTOR_SOURCE); the program's args. The re-run takes this program
and its arguments back from /proc/self/cmdline: ``python -c`` keeps them nowhere else.

The bundle: base64(zlib(marshal((package, [(module, source), ...], bundle.py's source)))), the
modules in the order they import each other, the last one the program, run as ``__main__`` of
``package`` (as ``python -m package`` would; see bundle.py's install).

Compiling the collector's source costs ~15 ms of CPU a node, paid 32 times on the one host of an
emulated cluster. So each node keeps the compiled modules (one marshalled file) in a private
directory (mode 0700, owned by the user; checked before every use, else not used) under a name
made of the bundle's hash and the interpreter's exact version: the first attach to a node
compiles, the later ones load. The compiling, keeping and installing is bundle.py's, sent in the
bundle, compiled on a miss and cached with the modules: this program is compiled by every node
at every start, so it stays small (its size is start-up time).

Python 2.7 to 3.7 must be able to compile it (to say what they lack): no f-strings. It uses the
posix module, not os: os.py imports _collections_abc, ~1 ms a node.
"""

import marshal
import posix as os
import sys


def has_json():
    for name in ("_json", "json"):
        try:
            __import__(name)
            return True
        except ImportError:
            pass
    return False


if sys.version_info < (3, 8) or not has_json():
    import os as full_os
    argv = open("/proc/self/cmdline", "rb").read().split(b"\0")[:-1]
    for python in (sys.argv[1], "python3") if sys.argv[1] else ():
        try:
            full_os.execvp(python, [python] + argv[1:5] + [b""] + argv[6:])
        except OSError:
            pass
    sys.exit("slurmdiag: the collector needs Python 3.8+ with its json module, found "
             + sys.version.split()[0])

root, digest, bundle = sys.argv[2:5]
del sys.argv[1:5]
uid = os.getuid()
folder = "%s/slurmdiag-%d" % (root, uid)
path = "%s/%s-%s-%x" % (folder, digest, sys.implementation.cache_tag, sys.hexversion)


def private():
    st = os.lstat(folder)
    return st.st_uid == uid and st.st_mode & 0o170777 == 0o40700


program = None
if root:
    try:
        if private():
            with open(path, "rb") as f:
                package, modules, own = program = marshal.loads(f.read())
    except (OSError, ValueError, EOFError, TypeError):
        program = None
if program is None:
    import binascii
    import zlib
    data = bundle if bundle != "-" else os.environ.get(b"SLURMDIAG_COLLECTOR_SOURCE") or sys.exit(
        "slurmdiag: the collector source is not in the environment")
    package, sources, own = marshal.loads(zlib.decompress(binascii.a2b_base64(data)))
    own = compile(own, "slurmdiag/collector/bundle.py", "exec")
scope = vars(type(sys)("bundle"))
exec(own, scope)
if program is None:
    modules = scope["compile_and_keep"](package, sources, own, root and folder, path, private)
scope["install"](package, modules)

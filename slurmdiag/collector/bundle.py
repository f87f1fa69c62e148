"""The node's side of a bundle: compile its modules, keep their code in the node cache, install.

Not part of the collector: the transport puts its source in the bundle, loader.py compiles it
only when the node cache has no compiled bundle for this interpreter, and the cache keeps its
code with the modules' (so that the code every node compiles at every start, the loader, stays
small: its size is start-up time). The cache directory is
private (mode 0700, owned by the user; the loader checks it before every use, else it is not
used); the file is written with O_EXCL|O_NOFOLLOW under a temporary name, then renamed; the
newest 4 files of the same interpreter are kept, ours included, and older versions' (and
unfinished temporary files) removed: a few versions used in turn (a watchdog and a newer CLI)
do not evict each other. Stdlib only, Python 3.8 (the loader checked), posix not os.
"""

import marshal
import posix as os
import sys


def compile_and_keep(package, sources, own, folder, path, private):
    """[(module, code)] of ``sources``; kept at ``path`` with ``own`` (this module's code) when
    ``folder`` (or "") is private."""
    where = package.replace(".", "/") + "/" if package else ""
    # optimize=2: without docstrings (and asserts, which it has none of): less to load at start-up
    modules = [(name, compile(text, where + name + ".py", "exec", optimize=2))
               for name, text in sources]
    if folder:
        try:
            keep(marshal.dumps((package, modules, own)), folder, path, private)
        except OSError:
            pass
    return modules


def install(package, modules):
    """Run the modules in order, each in sys.modules under ``package`` before the next one runs
    (a sibling's ``from .tools import x`` finds it there), the last one as ``__main__``."""
    if package:
        parent = ""
        for part in package.split("."):
            parent += part
            sys.modules.setdefault(parent, type(sys)(parent)).__path__ = []  # type: ignore[attr-defined]
            parent += "."
    for name, code in modules[:-1]:
        module = sys.modules[package + "." + name] = type(sys)(package + "." + name)
        module.__package__ = package
        exec(code, module.__dict__)  # noqa: S102 - the modules it was sent
    exec(modules[-1][1], {"__name__": "__main__", "__package__": package})  # noqa: S102


def keep(data, folder, path, private):
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    if not private():
        return
    temp = f"{path}.{os.getpid()}"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.rename(temp, path)
    tag = path[len(folder) + 1:].partition("-")[2]
    found = []
    for name in os.listdir(folder):
        if name.partition(".")[0].partition("-")[2] == tag:
            try:
                found.append((os.stat(folder + "/" + name).st_mtime, name))
            except OSError:
                pass
    for _, name in sorted(found)[:-4]:
        try:
            os.unlink(folder + "/" + name)
        except OSError:
            pass

"""Where a node's shell task is in its script: the line that runs the command it waits for.

A wrapper script that never gets to python (staging data, pulling a container, installing
packages) holds the node's ranks back; bash does not say which line it runs, but its child does:
the script's line that starts that command (``sleep 3600``, ``rsync -a ...``) is the place. The
line is chosen by the command's name and as many of its arguments as the line spells out; two
lines as good as each other name no line. Only "path:line" leaves the node, never the text.
"""

import posix as os

from .procfs import _read, read_cmdline

SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "mksh"})
#: A script larger than this is not read.
MAX_SCRIPT_BYTES = 1 << 20
#: The child's arguments compared with a line.
MAX_ARGS = 8
#: A shell's subshells (a function in a pipeline, ``( ... )``) walked down to the command.
MAX_SUBSHELLS = 4
_S_IFMT, _S_IFREG = 0o170000, 0o100000
_SEPARATORS = str.maketrans({c: " " for c in ";&|(){}`!<>\"'"})
# options of bash and sh that take the next argument as their value
_VALUED = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})


def _base(path):
    return path.rsplit("/", 1)[-1]


def script_of(cmdline):
    """The script file a shell's command line runs, or None (``-c``, ``-s``, stdin, no shell)."""
    if len(cmdline) < 2 or _base(cmdline[0]) not in SHELLS:
        return None
    skip = False
    for index, arg in enumerate(cmdline[1:], start=1):
        if skip:
            skip = False
        elif arg == "--":
            return cmdline[index + 1] if index + 1 < len(cmdline) else None
        elif arg in _VALUED:
            skip = True
        elif arg[:1] in ("-", "+") and len(arg) > 1:
            if not arg.startswith("--") and ("c" in arg[1:] or "s" in arg[1:]):
                return None  # the commands come from the argument or from stdin
        else:
            return arg
    return None


def _words(line):
    code = line
    for mark in (" #", "\t#"):
        code = code.split(mark, 1)[0]
    return code.translate(_SEPARATORS).split()


def command_line(text, command):
    """The 1-based line of ``text`` that best starts ``command`` (an argv), or None."""
    name = _base(command[0]) if command else ""
    if not name:
        return None
    args = [a for a in command[1:MAX_ARGS + 1] if a]
    best, found = -1, []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("#"):
            continue
        words = _words(line)
        if not any(w == name or w.endswith("/" + name) for w in words):
            continue
        score = sum(1 for a in args if a in words)
        if score > best:
            best, found = score, [number]
        elif score == best:
            found.append(number)
    return found[0] if len(found) == 1 else None


def _open_script(pid, script):
    """(the path to read, the script's absolute path) through the descriptor the shell keeps
    on its script (bash keeps one, 255 and down): right after a ``cd`` and across mount namespaces;
    None when no descriptor of the shell names a file of that name."""
    name = "/" + _base(script)
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in sorted(fds, key=lambda f: -int(f) if f.isdigit() else 0):  # the highest first
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.endswith(name) and (not script.startswith("/") or target == script):
            return f"/proc/{pid}/fd/{fd}", target
    return None


def _read_script(pid, script):
    """The text of a shell's script as the shell sees it (its descriptor on it, else its root
    and working directory), and its absolute path when known."""
    opened = _open_script(pid, script)
    if opened is not None:
        path, script = opened
    else:
        path = f"/proc/{pid}/root{script}" if script.startswith("/") else f"/proc/{pid}/cwd/{script}"
    try:
        info = os.stat(path)
    except OSError:
        return None
    # a regular file only: a FIFO or a device (bash <(...), /dev/stdin) would block the read
    if info.st_mode & _S_IFMT != _S_IFREG or info.st_size > MAX_SCRIPT_BYTES:
        return None
    text = _read(path)
    return None if text is None else (text, script)


def shell_line(pid, cmdline, children_of):
    """"path:line" of the script shell ``pid`` runs, at the line of the command it waits for,
    or None. ``children_of(pid)``: the pids of its children; a subshell (a child with the
    shell's own command line) is walked through to the command below it."""
    script = script_of(cmdline)
    if script is None:
        return None
    command, below = None, pid
    for _ in range(MAX_SUBSHELLS):
        kids = [(kid, read_cmdline(kid)) for kid in children_of(below)]
        if not kids:
            return None
        # into a subshell first (``stage | cat``: the function runs there, cat beside it)
        inner = next((kid for kid, argv in kids if argv == cmdline), None)
        if inner is None:
            command = next((argv for _, argv in kids if argv), None)
            break
        below = inner
    if not command:
        return None
    read = _read_script(pid, script)
    if read is None:
        return None
    text, script = read
    line = command_line(text, command)
    if line is None:
        return None
    if not script.startswith("/"):
        try:
            script = os.readlink(f"/proc/{pid}/cwd").rstrip("/") + "/" + script
        except OSError:
            pass
    return f"{script}:{line}"

"""The node side of ``slurmdiag doctor``: stdlib only, shipped like the collector (one srun step).

It checks what the collector will need on this node, WITHOUT inspecting any process: the Python
that runs it, py-spy and strace and whether this user may trace its own processes here (Yama's
``ptrace_scope``, the effective capabilities, seccomp, container hints), the node cache directory
and nvidia-smi where the node has GPUs. The result is one JSON document framed like the collector's
(``@SDG1 <node> <seq> <total> <crc32> <chunk>``, see slurmdiag/transport/framing.py)::

    {"format": "slurmdiag-doctor/1", "node": ..., "checks": [{"name", "status", "detail", "fix"}]}

``status`` is ok | warning | failed. The decision functions are pure (text in, check out) and are
tested on text in tests/unit/test_doctor.py; this file must keep working on Python 3.8.
"""

import base64
import json
import os
import subprocess
import sys
import zlib

FORMAT = "slurmdiag-doctor/1"
CHUNK_CHARS = 600
CAP_SYS_PTRACE = 19
MIN_PYTHON = (3, 8)
_PYSPY_FIX = (
    "install py-spy where the nodes see it: pip install 'slurmdiag[pyspy]' into the controller's "
    "venv on a shared file system, or name it with --py-spy PATH"
)


def check(name, status, detail, fix=""):
    return {"name": name, "status": status, "detail": detail, "fix": fix}


def parse_cap_eff(status_text):
    """``CapEff:\\t000001ffffffffff`` of /proc/PID/status -> the capability bits (0 if absent)."""
    for line in status_text.splitlines():
        if line.startswith("CapEff:"):
            try:
                return int(line.split(":", 1)[1].strip(), 16)
            except ValueError:
                return 0
    return 0


def parse_seccomp(status_text):
    """``Seccomp:\\t2`` -> 2 (filter mode); None when the kernel does not say."""
    for line in status_text.splitlines():
        if line.startswith("Seccomp:"):
            value = line.split(":", 1)[1].strip()
            return int(value) if value.isdigit() else None
    return None


def ptrace_decision(scope_text, cap_eff, tool_has_file_caps=False):
    """Can py-spy/strace, run as this user by the collector, attach to this user's ranks?

    ``scope_text``: /proc/sys/kernel/yama/ptrace_scope (None without Yama). The ranks are not
    descendants of the collector, so scope 1 needs CAP_SYS_PTRACE (in the collector's effective
    set, or as a file capability of the tool), scope 2 too, and scope 3 forbids attaching at all.
    """
    has_cap = bool(cap_eff >> CAP_SYS_PTRACE & 1) or tool_has_file_caps
    if scope_text is None:
        return check("ptrace", "ok", "no Yama LSM: the usual same-user rule applies")
    scope = scope_text.strip()
    how = "CAP_SYS_PTRACE in effect" if cap_eff >> CAP_SYS_PTRACE & 1 else "py-spy has file capabilities"
    if scope == "0":
        return check("ptrace", "ok", "kernel.yama.ptrace_scope=0: a user may trace its own processes")
    if scope in ("1", "2") and has_cap:
        return check("ptrace", "ok", f"kernel.yama.ptrace_scope={scope}, and {how}")
    if scope == "1":
        return check(
            "ptrace", "failed",
            "kernel.yama.ptrace_scope=1: only a parent may trace its children, and the ranks are "
            "not children of the collector",
            "on the nodes: sysctl -w kernel.yama.ptrace_scope=0 (and in /etc/sysctl.d), or "
            "setcap cap_sys_ptrace+ep on py-spy and strace",
        )
    if scope == "2":
        return check(
            "ptrace", "failed",
            "kernel.yama.ptrace_scope=2: only processes with CAP_SYS_PTRACE may trace",
            "setcap cap_sys_ptrace+ep on py-spy and strace, or run slurmdiag as root",
        )
    if scope == "3":
        return check(
            "ptrace", "failed",
            "kernel.yama.ptrace_scope=3: no process may trace any other, not even root's",
            "only a reboot lowers it; ask the site to boot the nodes with ptrace_scope 0-2",
        )
    return check("ptrace", "warning", f"unknown kernel.yama.ptrace_scope {scope!r}")


def container_hints(environ, cgroup_text, files_present):
    """Signs that this step runs inside a container (its ranks may be in another PID namespace)."""
    hints = []
    for var in ("SINGULARITY_CONTAINER", "APPTAINER_CONTAINER", "container"):
        if environ.get(var):
            hints.append(f"{var}={environ[var]}")
    for path in ("/.dockerenv", "/run/.containerenv"):
        if path in files_present:
            hints.append(path)
    for word in ("docker", "kubepods", "containerd", "lxc", "enroot", "pyxis"):
        if word in cgroup_text:
            hints.append(f"cgroup names {word}")
            break
    return hints


def parse_mountinfo(text, path):
    """(mount point, options) of the mount holding ``path``, from /proc/self/mountinfo (pure)."""
    best = ("", [])  # type: tuple
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 6:
            continue
        point = fields[4].replace("\\040", " ")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            options = fields[5].split(",")
            if " - " in line:  # super options after the separator (ro there counts too)
                options += line.split(" - ", 1)[1].split()[-1].split(",")
            best = (point, options)
    return best


def cache_decision(path, exists, writable, mount_options, private_dir_state):
    """The node cache directory: usable (ok), unusable (warning: attach then compiles each time)."""
    name = "node cache"
    if not path:
        return check(name, "ok", "off (--node-cache ''): the collector is compiled on every attach")
    if not exists:
        return check(name, "warning", f"{path} does not exist: the collector is compiled on every "
                     "attach", "create it, or choose another with --node-cache DIR")
    if "ro" in mount_options:
        return check(name, "warning", f"{path} is on a read-only mount",
                     "choose a writable node-local directory with --node-cache DIR")
    if not writable:
        return check(name, "warning", f"{path} is not writable for this user",
                     "choose a writable node-local directory with --node-cache DIR")
    if private_dir_state:
        return check(name, "warning", private_dir_state,
                     "remove it; the next attach creates it with mode 0700")
    note = ""
    if "noexec" in mount_options:
        note = " (noexec does not matter: the cache holds compiled code that python reads)"
    return check(name, "ok", f"{path} writable{note}")


def _read(path):
    try:
        with open(path) as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError):
        return None


def _find_tool(candidates, name):
    for path in list(candidates) + ["/usr/bin/" + name, "/usr/local/bin/" + name]:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(directory, name)
        if directory and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _run(argv, timeout=10):
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, str(exc)
    return done.returncode, done.stdout.decode(errors="replace").strip()


def _can_create_in(directory):
    """Tried for real (root passes every access() test; read-only mounts only show so)."""
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=directory, prefix=".slurmdiag-doctor."):
            return True
    except OSError:
        return False


def _file_caps(path):
    try:
        return bool(os.getxattr(path, "security.capability"))
    except (OSError, AttributeError):
        return False


def tool_check(name, candidates, version_flag, fix, explicit=False):
    """``explicit``: the user named the path (--py-spy): it must be there, PATH does not count."""
    if explicit:
        path = next(
            (p for p in candidates if os.path.isfile(p) and os.access(p, os.X_OK)), None)
    else:
        path = _find_tool(candidates, name)
    if path is None and explicit:
        return check(name, "failed", "{} does not exist or is not executable on this node".format(", ".join(candidates)), fix), None
    if path is None:
        tried = ", ".join(candidates) or "PATH"
        return check(name, "failed", f"not found (tried {tried} and PATH)", fix), None
    code, out = _run([path, version_flag])
    if code != 0:
        return check(name, "failed", "{} does not run: {}".format(path, (out or "")[:200]), fix), path
    first = out.splitlines()[0] if out else ""
    return check(name, "ok", f"{path} ({first[:80]})"), path


def trace_trial(pyspy_path, strace_path):
    """Attach for real: py-spy and strace to a python of this user that is NOT their child (the
    ranks are not the collector's children either), the way the collector will."""
    if not pyspy_path and not strace_path:
        return check("trace test", "warning", "not tried: neither py-spy nor strace was found")
    import time

    target = subprocess.Popen([sys.executable, "-S", "-c", "import time\ntime.sleep(60)"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    problems, tried = [], []
    try:
        time.sleep(0.3)  # let it reach its sleep
        if pyspy_path:
            tried.append("py-spy")
            code, out = _run([pyspy_path, "dump", "--pid", str(target.pid)], timeout=20)
            if code != 0:
                last = (out or "no output").strip().splitlines()[-1]
                problems.append(f"py-spy dump failed: {last[:200]}")
        if strace_path:
            tried.append("strace")
            tracer = subprocess.Popen([strace_path, "-p", str(target.pid), "-e", "trace=none"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(0.5)
            tracer.terminate()
            try:
                err = tracer.communicate(timeout=5)[1].decode(errors="replace")
            except subprocess.TimeoutExpired:
                tracer.kill()
                err = tracer.communicate()[1].decode(errors="replace")
            refused = [ln for ln in err.splitlines() if "ptrace" in ln or "not permitted" in ln]
            if refused:
                problems.append(f"strace: {refused[-1].strip()[:200]}")
    finally:
        target.kill()
        target.wait()
    if problems:
        return check("trace test", "failed", "; ".join(problems),
                     "see the ptrace line: ptrace_scope, CAP_SYS_PTRACE or the container's "
                     "seccomp profile refuse it")
    return check("trace test", "ok", " and ".join(tried) + " attached to a process of this user "
                 "that is not their child")


def python_check():
    version = ".".join(str(v) for v in sys.version_info[:3])
    if sys.version_info[:2] < MIN_PYTHON:  # the loader re-runs an older one; say it anyway
        return check("node python", "failed", f"{sys.executable} is {version}",
                     "install python3 3.8+ on the nodes, or name one with --node-python")
    return check("node python", "ok", "{} {}".format(sys.executable or "python", version))


def _private_dir_state(cache):
    private = f"{cache.rstrip('/')}/slurmdiag-{os.getuid()}"
    try:
        st = os.lstat(private)
    except OSError:
        return ""
    if st.st_uid != os.getuid() or (st.st_mode & 0o170777) != 0o40700:
        return f"{private} exists but is not this user's directory of mode 0700: it is not used"
    return ""


def cache_check(cache):
    if not cache:
        return cache_decision("", False, False, [], "")
    exists = os.path.isdir(cache)
    _, options = parse_mountinfo(_read("/proc/self/mountinfo") or "", os.path.realpath(cache))
    writable = exists and _can_create_in(cache)
    return cache_decision(cache, exists, writable, options, _private_dir_state(cache) if exists else "")


def gpu_check(candidates):
    has_gpu = os.path.exists("/dev/nvidia0") or os.path.isdir("/proc/driver/nvidia/gpus")
    if not has_gpu and not candidates:
        return check("nvidia-smi", "ok", "no NVIDIA GPU on this node: not needed")
    result, path = tool_check("nvidia-smi", candidates, "-L",
                              "install the NVIDIA driver utilities, or name it with --nvidia-smi",
                              explicit=bool(candidates))
    if path is not None and result["status"] == "ok":
        _code, out = _run([path, "-L"])
        gpus = [line for line in (out or "").splitlines() if line.startswith("GPU ")]
        result["detail"] = f"{path}: {len(gpus)} GPU(s)"
    return result


def run_checks(args):
    checks = [python_check()]
    pyspy, pyspy_path = tool_check("py-spy", args.get("pyspy") or [], "--version", _PYSPY_FIX,
                                   explicit=bool(args.get("pyspy_explicit")))
    checks.append(pyspy)
    strace, strace_path = tool_check("strace", args.get("strace") or [], "-V",
                                     "install strace on the nodes (apt/dnf install strace)")
    checks.append(strace)
    status = _read("/proc/self/status") or ""
    checks.append(ptrace_decision(
        _read("/proc/sys/kernel/yama/ptrace_scope"), parse_cap_eff(status),
        bool(pyspy_path) and _file_caps(pyspy_path),
    ))
    checks.append(trace_trial(pyspy_path if pyspy["status"] == "ok" else None,
                              strace_path if strace["status"] == "ok" else None))
    seccomp = parse_seccomp(status)
    if seccomp == 2:
        checks.append(check("seccomp", "warning", "a seccomp filter is active in this step: "
                            "ptrace may be refused by it", "run the step without the filter"))
    present = [p for p in ("/.dockerenv", "/run/.containerenv") if os.path.exists(p)]
    hints = container_hints(os.environ, _read("/proc/self/cgroup") or "", present)
    if hints:
        checks.append(check(
            "container", "warning", "the step runs in a container ({})".format(", ".join(hints)),
            "the ranks must be in the step's PID namespace and the container needs SYS_PTRACE",
        ))
    else:
        checks.append(check("container", "ok", "no container around the step"))
    checks.append(cache_check(args.get("cache", "/dev/shm")))
    checks.append(gpu_check(args.get("nvidia_smi") or []))
    return checks


def frame_lines(node, doc):
    data = json.dumps(doc, separators=(",", ":")).encode()
    payload = base64.b64encode(zlib.compress(data, 6)).decode("ascii")
    crc = "{:08x}".format(zlib.crc32(payload.encode("ascii")) & 0xFFFFFFFF)
    chunks = [payload[i:i + CHUNK_CHARS] for i in range(0, len(payload), CHUNK_CHARS)] or [""]
    total = len(chunks)
    return [f"@SDG1 {node} {seq} {total} {crc} {c}\n" for seq, c in enumerate(chunks)]


def main(argv):
    args = json.loads(argv[1]) if len(argv) > 1 else {}
    node = os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]
    try:
        checks = run_checks(args)
    except Exception as exc:  # noqa: BLE001 - a node's failure is data, never a lost node
        checks = [check("node checks", "failed", f"{type(exc).__name__}: {exc}")]
    doc = {"format": FORMAT, "node": node, "checks": checks}
    for line in frame_lines(node, doc):
        os.write(1, line.encode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

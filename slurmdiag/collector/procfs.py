"""/proc readers, and the masking of secrets in what leaves the node (environment, arguments)."""

import posix as os

# Secrets never leave a node. The environment: only ALLOW_ENV_NAMES, and names under
# ALLOW_ENV_PREFIXES that contain none of DENY_ENV_WORDS (compared case-insensitively, so
# NCCL_IB_Token is dropped too). Everything else stays: PWD (the working directory), HOME, PATH...
# Values that do leave, and every command-line argument, go through mask_secrets below.
ALLOW_ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_")
DENY_ENV_WORDS = ("TOKEN", "KEY", "SECRET", "PASS", "PWD", "CRED", "AUTH", "COOKIE", "SESSION",
                  "PRIVATE", "SIGNATURE")
# Command-line options (and NAME=value arguments) whose value is masked: any word of the name,
# split at -, _, . and camelCase, in SECRET_WORDS (--wandb-api-key, --hf_token, hfToken, --db-pass).
SECRET_WORDS = frozenset(["token", "password", "passwd", "pass", "pwd", "passphrase", "secret",
                          "key", "apikey", "credential", "credentials", "cred", "creds", "auth",
                          "cookie", "session", "private", "signature"])
MASK = "***"
ALLOW_ENV_NAMES = frozenset(
    [
        "CUDA_VISIBLE_DEVICES",
        "MASTER_ADDR",
        "MASTER_PORT",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "TORCHELASTIC_RUN_ID",
        "OMP_NUM_THREADS",
        "SLURM_JOB_ID",
        "SLURM_STEP_ID",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_NTASKS",
        "SLURM_NODEID",
        "SLURMD_NODENAME",
        "SLURM_JOB_NODELIST",
        "SLURM_CPUS_ON_NODE",
    ]
)
MAX_ARG_CHARS = 2000


def _ascii_digits(text):
    """True for plain ASCII digits: ``str.isdigit()`` admits ``'²'``, which ``int()`` refuses."""
    return bool(text) and len(text) <= 18 and text.isascii() and text.isdigit()


def _read(path, binary=False, one_show=False):
    """A whole file as text (or bytes), None if it cannot be read.

    os-level: a /proc walk reads hundreds of small files, and io.open's buffered object costs a
    third of each read. ``one_show``: a /proc file the kernel writes in one piece (stat, comm,
    cmdline, environ, wchan), so a read that does not fill the buffer got all of it; files of
    records (/proc/net/tcp) come a page of whole records at a time and are read to the end.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    chunks = []
    try:
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            if one_show and len(chunk) < 65536:
                break
    except OSError:
        return None
    finally:
        os.close(fd)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return data if binary else data.decode("utf-8", "replace")


def _read_int(path):
    text = _read(path)
    try:
        return int(text.strip())
    except (AttributeError, ValueError):
        return None


def read_stat(pid):
    """Fields of /proc/PID/stat we use, or None if the process is gone."""
    data = _read(f"/proc/{pid}/stat", one_show=True)
    if not data:
        return None
    close = data.rfind(")")
    fields = data[close + 2 :].split()
    try:
        return {
            "comm": data[data.find("(") + 1 : close],
            "state": fields[0],
            "ppid": int(fields[1]),
            "ticks": int(fields[11]) + int(fields[12]),
            "num_threads": int(fields[17]),
            "starttime": int(fields[19]),
            "rss_pages": int(fields[21]),
        }
    except (IndexError, ValueError):
        return None


def parse_environ(data):
    """Raw /proc/PID/environ bytes -> {name: value}."""
    text = data.decode("utf-8", "replace")  # one decode: NUL and "=" never sit inside a character
    env = {}
    for item in text.split("\0"):
        name, sep, value = item.partition("=")
        if sep and name:
            env[name] = value
    return env


def _name_words(name):
    """'--wandb-api-key' -> ['wandb', 'api', 'key']; 'hfToken' -> ['hf', 'token']."""
    words, word, lower_before = [], "", False
    for ch in name:
        if not ch.isalnum():
            if word:
                words.append(word)
            word, lower_before = "", False
            continue
        if ch.isupper() and lower_before and word:
            words.append(word)
            word = ""
        word += ch.lower()
        lower_before = ch.islower() or ch.isdigit()
    if word:
        words.append(word)
    return words


def secret_name(name):
    """True for an option or variable name that says its value is a secret."""
    return any(word in SECRET_WORDS for word in _name_words(name))


def mask_url_credentials(text):
    """``scheme://user:pw@host`` -> ``scheme://user:***@host``, anywhere in ``text``."""
    if "://" not in text or "@" not in text:
        return text
    out, pos = [], 0
    while True:
        found = text.find("://", pos)
        if found < 0:
            break
        start = end = found + 3
        while end < len(text) and text[end] not in "/?# \t\n\"'<>":
            end += 1
        authority = text[start:end]
        at = authority.rfind("@")
        user, colon, _ = authority[:max(at, 0)].partition(":")
        if at > 0 and colon:
            out.append(text[pos:start] + user + ":" + MASK)
            pos = start + at
        else:
            out.append(text[pos:start])
            pos = start
    out.append(text[pos:])
    return "".join(out)


def _is_setting(name, value):
    """``NAME=value`` as env(1) or hydra take it; not a piece of code (``-c "key='a'; ..."``)."""
    return (bool(name) and name.replace("_", "a").replace(".", "a").replace("-", "a").isalnum()
            and not any(ch.isspace() or ch in ";()'\"" for ch in value))


def mask_secrets(args):
    """A command line with the values of secret-looking options and URL credentials masked.

    ``--token=V`` and ``--token V`` (the next argument, unless it is an option), ``NAME=V``
    arguments (``env HF_TOKEN=V cmd``, hydra's ``wandb.api_key=V``), ``https://u:V@host``.
    Short options (``-p``: a port as often as a password) are left alone.
    """
    out, hide_next = [], False
    for arg in args:
        if hide_next and not arg.startswith("-"):
            out.append(MASK)
            hide_next = False
            continue
        hide_next = False
        name, sep, value = arg.partition("=")
        if arg.startswith("--") and secret_name(name):
            if not sep:
                hide_next = True
            elif value:
                arg = name + "=" + MASK
        elif sep and value and not arg.startswith("-") and _is_setting(name, value) \
                and secret_name(name):
            arg = name + "=" + MASK
        out.append(mask_url_credentials(arg))
    return out


def read_cmdline(pid):
    data = _read(f"/proc/{pid}/cmdline", binary=True, one_show=True)
    if data is None:
        return []
    args = data.split(b"\0")
    if args and args[-1] == b"":
        args.pop()
    out = []
    for arg in args:
        text = arg.decode("utf-8", "replace")
        if len(text) > MAX_ARG_CHARS:
            text = text[:MAX_ARG_CHARS] + f"...[{len(text) - MAX_ARG_CHARS} chars cut]"
        out.append(text)
    return mask_secrets(out)


def allowed_env(env):
    """The environment variables that may leave the node (allowlist; secrets never)."""
    out = {}
    for name in sorted(env):
        if name in ALLOW_ENV_NAMES or (
            name.startswith(ALLOW_ENV_PREFIXES)
            and not any(w in name.upper() for w in DENY_ENV_WORDS)
        ):
            out[name] = mask_url_credentials(env[name])
    return out


def read_tracer(pid):
    """{"pid", "comm", "cmdline"} of the process ptrace-attached to ``pid`` (a debugger: gdb -p,
    a py-spy that never detached, another tool's strace), or None. Read before the collector's
    own strace attaches. The cmdline is masked like the ranks' (read_cmdline)."""
    status = _read(f"/proc/{pid}/status", one_show=True) or ""
    for line in status.splitlines():
        if line.startswith("TracerPid:"):
            tracer = line[10:].strip()
            if not tracer.isdigit() or tracer == "0":
                return None
            comm = _read(f"/proc/{tracer}/comm", one_show=True)
            return {"pid": int(tracer), "comm": comm.strip() if comm else None,
                    "cmdline": read_cmdline(int(tracer))[:8]}
    return None


def task_statuses(pid):
    """[(tid, /proc/PID/task/TID/status text)] of the process's threads (a thread gone meanwhile
    has no text: ""), or None when the process is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    return [(tid, _read(f"/proc/{pid}/task/{tid}/status") or "") for tid in tids]

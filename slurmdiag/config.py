"""Configuration: TOML file + environment + command-line flags -> one frozen ``Settings``.

Precedence, lowest first: built-in defaults, the TOML file, ``SLURMDIAG_<SECTION>_<KEY>``
environment variables (e.g. ``SLURMDIAG_WATCH_STALE_AFTER=15m``), then flags (``overrides``).

The file is ``--config FILE``, else ``$SLURMDIAG_CONFIG``, else ``/etc/slurmdiag/config.toml`` when
it exists, else defaults only. Every key is documented in ``deploy/config.example.toml`` and
docs/watch.md. ``check_config`` reports every unknown key (with a did-you-mean) and every bad value
in one pass, each with its key path. Webhook URLs are secrets: they never appear in a repr, a
message or a problem report.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurmdiag.errors import ConfigError

DEFAULT_CONFIG_PATH = Path("/etc/slurmdiag/config.toml")
CONFIG_ENV = "SLURMDIAG_CONFIG"
ENV_PREFIX = "SLURMDIAG_"
DEFAULT_REPORT_DIR = Path("/var/lib/slurmdiag/reports")
# State (sqlite, lock, heartbeat) lives in a hidden directory of report_dir by default, so one
# writable directory is enough for a user's scrontab; the nginx recipe refuses dot-paths.
STATE_SUBDIR = ".slurmdiag"

NOTIFY_KINDS = ("slack", "mattermost", "teams", "webhook")
_SECRET_KEYS = frozenset({"notify.webhook_url"})
REDACTED = "<redacted>"


# --------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WatchSettings:
    """``[watch]``: which jobs to look at, when a job counts as stuck, where reports go."""

    stale_after: float = 600.0
    min_runtime: float = 600.0
    report_dir: Path = DEFAULT_REPORT_DIR
    report_url_base: str | None = None
    state_db: Path = DEFAULT_REPORT_DIR / STATE_SUBDIR / "watch.db"
    heartbeat_file: Path = DEFAULT_REPORT_DIR / STATE_SUBDIR / "heartbeat.json"
    # Prometheus text file written after every pass (node-exporter's textfile collector); None: off.
    metrics_file: Path | None = None
    cooldown: float = 1800.0
    notify_recovered: bool = True
    cluster_name: str | None = None
    partitions: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    min_nodes: int = 1
    job_name_patterns: tuple[str, ...] = ()
    exclude_job_name_patterns: tuple[str, ...] = ("slurmdiag-watch*",)
    exclude_users: tuple[str, ...] = ()
    exclude_jobs: tuple[str, ...] = ()
    confirm_samples: int = 3
    confirm_interval: float = 2.0
    attach_timeout: float = 60.0
    max_jobs_per_run: int = 5

    @property
    def lock_file(self) -> Path:
        return self.state_db.with_name(self.state_db.name + ".lock")


@dataclass(frozen=True, repr=False)
class NotifySettings:
    """``[notify]``: where alerts go. ``kind=None`` means: find and report, post nothing."""

    kind: str | None = None
    webhook_url: str | None = None  # resolved (from the file or from webhook_url_env); a secret
    webhook_url_env: str | None = None
    timeout: float = 10.0
    retries: int = 3
    max_time: float = 60.0

    @property
    def enabled(self) -> bool:
        return self.kind is not None and bool(self.webhook_url)

    def __repr__(self) -> str:
        url = REDACTED if self.webhook_url else None
        return (
            f"NotifySettings(kind={self.kind!r}, webhook_url={url!r}, "
            f"webhook_url_env={self.webhook_url_env!r}, timeout={self.timeout!r}, "
            f"retries={self.retries!r}, max_time={self.max_time!r})"
        )


@dataclass(frozen=True)
class Settings:
    watch: WatchSettings = field(default_factory=WatchSettings)
    notify: NotifySettings = field(default_factory=NotifySettings)
    source: Path | None = None  # the config file read, if any
    # Warnings of the configuration (e.g. a duration without a unit), for the CLI to print.
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def to_dict(self) -> dict[str, Any]:
        """Plain values for ``config show`` / JSON; the webhook URL is redacted."""
        out: dict[str, Any] = {"source": str(self.source) if self.source else None}
        for section in ("watch", "notify"):
            values = {}
            for f in dataclasses.fields(getattr(self, section)):
                value = getattr(getattr(self, section), f.name)
                if f"{section}.{f.name}" in _SECRET_KEYS and value:
                    value = REDACTED
                elif isinstance(value, Path):
                    value = str(value)
                elif isinstance(value, tuple):
                    value = list(value)
                values[f.name] = value
            out[section] = values
        return out


@dataclass(frozen=True)
class ConfigProblem:
    """One thing wrong with a configuration, located by its key path (``watch.stale_after``)."""

    key: str
    message: str
    severity: str = "error"  # error | warning

    def __str__(self) -> str:
        return f"{self.key}: {self.message}" if self.key else self.message


# --------------------------------------------------------------------------------------------
# Value parsers: each takes the raw value (TOML value, or a string from env/flags) and returns
# the parsed value or raises _Bad with a message that never repeats a secret.
# --------------------------------------------------------------------------------------------


class _Bad(ValueError):
    pass


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION_RE = re.compile(r"^\s*(?:\d+(?:\.\d+)?\s*[smhd]\s*)+$")
_DURATION_PART_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")


def parse_duration(value: Any) -> float:
    """``"30s"``, ``"10m"``, ``"2h"``, ``"1d"``, ``"1h30m"`` or a number of seconds -> seconds."""
    if isinstance(value, bool):
        raise _Bad("expected a duration like 30s, 10m, 2h or 1d")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            seconds = float(text)
        elif _DURATION_RE.match(text):
            seconds = sum(
                float(num) * _DURATION_UNITS[unit] for num, unit in _DURATION_PART_RE.findall(text)
            )
        else:
            raise _Bad(f"{value!r} is not a duration (use e.g. 30s, 10m, 2h, 1d)")
    else:
        raise _Bad(f"expected a duration like 30s, 10m, 2h or 1d, got {type(value).__name__}")
    if seconds < 0:
        raise _Bad("a duration cannot be negative")
    return seconds


def bare_number(value: Any) -> bool:
    """True for a duration written without a unit (``600``, ``"10"``): seconds here, but minutes
    for Slurm (``--time=10``), so whoever reads it back gets told which was taken."""
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    return isinstance(value, str) and re.fullmatch(r"\s*\d+(?:\.\d+)?\s*", value) is not None


def bare_number_note(value: Any) -> str:
    """What a bare number was taken as, and how to write it unambiguously."""
    seconds = float(value)
    minutes = f"; write {format_duration(seconds)} to keep it" if seconds else ""
    return (
        f"{str(value).strip()} has no unit: taken as {seconds:g} seconds (Slurm would read "
        f"minutes){minutes}, or {format_duration(seconds * 60)} for minutes"
    )


def format_duration(seconds: float) -> str:
    """600 -> ``10m``, 5400 -> ``1h30m``, 12.5 -> ``12.5s``; the inverse of parse_duration."""
    if seconds != int(seconds):
        return f"{seconds:g}s"
    rest = int(seconds)
    if rest == 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def output_silence(seconds: float) -> str:
    """How long a job's output has been silent, as format_duration writes it: to the second
    under two minutes (``1m15s``), to the minute above (``47m``, ``1h2m``)."""
    whole = round(seconds) if seconds < 120 else round(seconds / 60) * 60
    return format_duration(whole)


def _duration(minimum: float = 0.0, maximum: float | None = None) -> Callable[[Any], float]:
    def parse(value: Any) -> float:
        seconds = parse_duration(value)
        if seconds < minimum:
            raise _Bad(f"must be at least {format_duration(minimum)}")
        if maximum is not None and seconds > maximum:
            raise _Bad(f"must be at most {format_duration(maximum)}")
        return seconds

    return parse


def _integer(minimum: int, maximum: int | None = None) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Bad(f"expected an integer, got {_describe(value)}")
        if value < minimum:
            raise _Bad(f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise _Bad(f"must be at most {maximum}, got {value}")
        return value

    return parse


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
    raise _Bad(f"expected true or false, got {_describe(value)}")


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise _Bad(f"expected a string, got {_describe(value)}")
    if not value.strip():
        raise _Bad("must not be empty")
    return value.strip()


def _optional_string(value: Any) -> str | None:
    if isinstance(value, str) and not value.strip():
        return None
    return _string(value)


def _string_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):  # from the environment or a flag: comma-separated
        return tuple(part.strip() for part in value.split(",") if part.strip())
    if not isinstance(value, list):
        raise _Bad(f"expected a list of strings, got {_describe(value)}")
    items = []
    for index, item in enumerate(value):
        if isinstance(item, int) and not isinstance(item, bool):
            item = str(item)  # exclude_jobs = [1234] is natural to write
        if not isinstance(item, str) or not item.strip():
            raise _Bad(f"item {index} must be a non-empty string, got {_describe(item)}")
        items.append(item.strip())
    return tuple(items)


def _path(value: Any) -> Path:
    return Path(os.path.expanduser(_string(value)))


def _optional_path(value: Any) -> Path | None:
    if isinstance(value, str) and not value.strip():
        return None
    return _path(value)


def _url_base(value: Any) -> str | None:
    text = _optional_string(value)
    if text is None:
        return None
    if not re.match(r"^https?://[^/\s]+", text):
        raise _Bad(f"{text!r} must start with http:// or https:// and name a host")
    return text


def _notify_kind(value: Any) -> str | None:
    text = _optional_string(value)
    if text is None or text.lower() in ("none", "off"):
        return None
    if text.lower() not in NOTIFY_KINDS:
        close = difflib.get_close_matches(text.lower(), NOTIFY_KINDS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise _Bad(f"{text!r} is not one of {', '.join(NOTIFY_KINDS)}{hint}")
    return text.lower()


def _webhook_url(value: Any) -> str | None:
    # The value is a secret: messages describe it, never quote it.
    if isinstance(value, str) and not value.strip():
        return None
    if not isinstance(value, str):
        raise _Bad(f"expected a string, got {type(value).__name__}")
    text = value.strip()
    if not re.match(r"^https?://[^/\s]+", text):
        raise _Bad("must be an http:// or https:// URL (value not shown: it is a secret)")
    if any(ch.isspace() for ch in text):
        raise _Bad("must not contain spaces (value not shown: it is a secret)")
    return text


def _env_name(value: Any) -> str | None:
    text = _optional_string(value)
    if text is None:
        return None
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text):
        raise _Bad(f"{text!r} is not an environment variable name")
    return text


def _describe(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return type(value).__name__


@dataclass(frozen=True)
class _Key:
    parse: Callable[[Any], Any]
    is_path: bool = False
    duration: bool = False  # a bare number is taken as seconds, with a warning saying so


_SCHEMA: dict[str, dict[str, _Key]] = {
    "watch": {
        "stale_after": _Key(_duration(minimum=0.0), duration=True),
        "min_runtime": _Key(_duration(minimum=0.0), duration=True),
        "report_dir": _Key(_path, is_path=True),
        "report_url_base": _Key(_url_base),
        "state_db": _Key(_path, is_path=True),
        "heartbeat_file": _Key(_path, is_path=True),
        "metrics_file": _Key(_optional_path, is_path=True),
        "cooldown": _Key(_duration(minimum=0.0), duration=True),
        "notify_recovered": _Key(_boolean),
        "cluster_name": _Key(_optional_string),
        "partitions": _Key(_string_list),
        "users": _Key(_string_list),
        "min_nodes": _Key(_integer(1)),
        "job_name_patterns": _Key(_string_list),
        "exclude_job_name_patterns": _Key(_string_list),
        "exclude_users": _Key(_string_list),
        "exclude_jobs": _Key(_string_list),
        "confirm_samples": _Key(_integer(2, 20)),
        "confirm_interval": _Key(_duration(minimum=0.1, maximum=60.0), duration=True),
        "attach_timeout": _Key(_duration(minimum=1.0, maximum=3600.0), duration=True),
        "max_jobs_per_run": _Key(_integer(1)),
    },
    "notify": {
        "kind": _Key(_notify_kind),
        "webhook_url": _Key(_webhook_url),
        "webhook_url_env": _Key(_env_name),
        "timeout": _Key(_duration(minimum=0.1, maximum=300.0), duration=True),
        "retries": _Key(_integer(0, 10)),
        "max_time": _Key(_duration(minimum=1.0, maximum=3600.0), duration=True),
    },
}

#: Every known key as ``section.key``; used by docs tests and ``config check``.
KNOWN_KEYS: tuple[str, ...] = tuple(f"{s}.{k}" for s, keys in _SCHEMA.items() for k in keys)


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------


def _toml_loads(text: str) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            raise ConfigError(
                "reading a TOML config on Python 3.10 needs the 'tomli' package",
                hint="pip install tomli (or run slurmdiag with Python 3.11+)",
            ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _TomlSyntax(str(exc)) from None


class _TomlSyntax(Exception):
    pass


def find_config_path(
    explicit: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None
) -> Path | None:
    """The config file to read: ``--config``, ``$SLURMDIAG_CONFIG``, or the system default if any."""
    env = os.environ if env is None else env
    if explicit:
        return Path(explicit)
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV])
    return DEFAULT_CONFIG_PATH if DEFAULT_CONFIG_PATH.is_file() else None


def _read_document(path: Path) -> tuple[dict[str, Any] | None, list[ConfigProblem]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, [ConfigProblem("", "no such file")]
    except OSError as exc:
        return None, [ConfigProblem("", f"cannot read: {exc.strerror}")]
    except UnicodeDecodeError:
        return None, [ConfigProblem("", "not UTF-8 text")]
    try:
        return _toml_loads(text), []
    except _TomlSyntax as exc:
        return None, [ConfigProblem("", f"invalid TOML: {exc}")]


def _did_you_mean(name: str, choices: Any) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _collect(
    document: Mapping[str, Any],
    env: Mapping[str, str],
    overrides: Mapping[str, Any],
    base_dir: Path | None,
) -> tuple[dict[str, dict[str, Any]], list[ConfigProblem]]:
    """Parse file, env and flags into per-section values; every problem is collected, none raised."""
    problems: list[ConfigProblem] = []
    values: dict[str, dict[str, Any]] = {section: {} for section in _SCHEMA}

    def take(section: str, key: str, raw: Any, origin: str, relative_to: Path | None) -> None:
        spec = _SCHEMA[section][key]
        location = f"{section}.{key}"
        try:
            parsed = spec.parse(raw)
        except _Bad as exc:
            problems.append(ConfigProblem(location, f"{exc}{origin}"))
            return
        if spec.duration and bare_number(raw):
            problems.append(ConfigProblem(location, f"{bare_number_note(raw)}{origin}", "warning"))
        if spec.is_path and isinstance(parsed, Path) and not parsed.is_absolute():
            parsed = (relative_to or Path.cwd()) / parsed
        values[section][key] = parsed

    for section, table in document.items():
        if section not in _SCHEMA:
            problems.append(
                ConfigProblem(section, f"unknown section{_did_you_mean(section, _SCHEMA)}")
            )
            continue
        if not isinstance(table, dict):
            problems.append(
                ConfigProblem(section, "must be a table: write it as [" + section + "]")
            )
            continue
        for key, raw in table.items():
            if key not in _SCHEMA[section]:
                hint = _did_you_mean(key, _SCHEMA[section])
                if not hint:
                    other = [s for s in _SCHEMA if s != section and key in _SCHEMA[s]]
                    hint = f" (it belongs in [{other[0]}])" if other else ""
                problems.append(ConfigProblem(f"{section}.{key}", f"unknown key{hint}"))
                continue
            take(section, key, raw, "", base_dir)

    for name, raw in env.items():
        if not name.startswith(ENV_PREFIX) or name == CONFIG_ENV:
            continue
        rest = name[len(ENV_PREFIX) :].lower()
        section, _, key = rest.partition("_")
        if section in _SCHEMA and key in _SCHEMA[section]:
            take(section, key, raw, f" (from ${name})", None)

    for location, raw in overrides.items():
        if raw is None:
            continue
        section, _, key = location.partition(".")
        if section not in _SCHEMA or key not in _SCHEMA[section]:
            problems.append(ConfigProblem(location, "unknown setting given on the command line"))
            continue
        take(section, key, raw, " (from the command line)", None)
    return values, problems


def _build(
    values: dict[str, dict[str, Any]],
    env: Mapping[str, str],
    source: Path | None,
    reported: set[str],
) -> tuple[Settings, list[ConfigProblem]]:
    problems: list[ConfigProblem] = []
    watch_values = dict(values["watch"])
    report_dir = watch_values.get("report_dir", DEFAULT_REPORT_DIR)
    state_dir = report_dir / STATE_SUBDIR
    watch_values.setdefault("state_db", state_dir / "watch.db")
    watch_values.setdefault("heartbeat_file", state_dir / "heartbeat.json")
    watch = WatchSettings(**watch_values)

    notify_values = dict(values["notify"])
    url_env = notify_values.get("webhook_url_env")
    if notify_values.get("webhook_url") is None and url_env:
        from_env = env.get(url_env, "").strip()
        if not from_env:
            problems.append(
                ConfigProblem(
                    "notify.webhook_url_env",
                    f"the environment variable {url_env} is not set (or empty)",
                    severity="warning",
                )
            )
        else:
            try:
                notify_values["webhook_url"] = _webhook_url(from_env)
            except _Bad as exc:
                problems.append(ConfigProblem("notify.webhook_url_env", f"${url_env}: {exc}"))
    notify = NotifySettings(**notify_values)
    webhook_reported = bool(reported & {"notify.webhook_url", "notify.webhook_url_env"})
    if notify.kind is not None and not notify.webhook_url and not url_env and not webhook_reported:
        problems.append(
            ConfigProblem(
                "notify.webhook_url",
                f"notify.kind is {notify.kind!r} but no webhook URL is configured: set "
                "notify.webhook_url or notify.webhook_url_env",
            )
        )
    if notify.kind is None and (notify.webhook_url or url_env) and "notify.kind" not in reported:
        problems.append(
            ConfigProblem(
                "notify.kind",
                f"a webhook is configured but notify.kind is not set (one of {', '.join(NOTIFY_KINDS)})",
            )
        )
    if notify.max_time < notify.timeout:
        problems.append(
            ConfigProblem("notify.max_time", "must be at least notify.timeout", severity="warning")
        )
    return Settings(watch=watch, notify=notify, source=source), problems


def _evaluate(
    path: Path | None,
    env: Mapping[str, str],
    overrides: Mapping[str, Any],
) -> tuple[Settings | None, list[ConfigProblem]]:
    document: dict[str, Any] = {}
    problems: list[ConfigProblem] = []
    if path is not None:
        read, problems = _read_document(path)
        if read is None:
            return None, problems
        document = read
    base_dir = path.resolve().parent if path is not None else None
    values, problems = _collect(document, env, overrides, base_dir)
    settings, more = _build(values, env, path, {p.key for p in problems})
    return settings, problems + more


def check_config(
    path: str | os.PathLike[str] | None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> list[ConfigProblem]:
    """Every problem of a configuration at once (unknown keys, bad values), in file order."""
    env = os.environ if env is None else env
    resolved = find_config_path(path, env)
    _, problems = _evaluate(resolved, env, overrides or {})
    return problems


def load_settings(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Read the configuration; raise ConfigError naming every error when there is any."""
    env = os.environ if env is None else env
    resolved = find_config_path(path, env)
    settings, problems = _evaluate(resolved, env, overrides or {})
    errors = [p for p in problems if p.severity == "error"]
    # A webhook whose env variable is missing is an error for a real run (nothing would be posted).
    errors += [p for p in problems if p.severity == "warning" and p.key == "notify.webhook_url_env"]
    if errors or settings is None:
        where = f" in {resolved}" if resolved else ""
        lines = "\n  ".join(str(p) for p in errors)
        raise ConfigError(f"invalid configuration{where}:\n  {lines}")
    warnings = tuple(str(p) for p in problems if p.severity == "warning")
    return dataclasses.replace(settings, warnings=warnings) if warnings else settings

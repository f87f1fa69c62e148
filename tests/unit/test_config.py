"""Config: TOML + environment + flags -> Settings; `config check` lists every problem at once."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurmdiag.cli import main
from slurmdiag.config import (
    KNOWN_KEYS,
    NotifySettings,
    Settings,
    check_config,
    format_duration,
    load_settings,
    parse_duration,
)
from slurmdiag.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "deploy" / "config.example.toml"
SECRET_URL = "https://hooks.slack.com/services/T0SECRET/B0SECRET/xoxSECRETTOKEN"


def write(tmp_path: Path, text: str, name: str = "config.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), ("90", 90),
     (45, 45), (2.5, 2.5), ("0s", 0), (" 5 m ", 300), ("1.5h", 5400)],
)  # fmt: skip
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["ten minutes", "10 min", "-5s", "", "1w", True, [1]])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_format_duration_inverts_parse() -> None:
    for text in ("30s", "10m", "2h", "1d", "1h30m", "0s"):
        assert format_duration(parse_duration(text)) == text


def test_example_config_loads_and_names_every_key() -> None:
    # GIVEN the shipped example and the webhook in the environment it names
    env = {"SLURMDIAG_WEBHOOK_URL": SECRET_URL}
    # WHEN it is checked and loaded
    problems = check_config(EXAMPLE, env=env)
    settings = load_settings(EXAMPLE, env=env)
    # THEN it is clean, and every known key is documented in it (set or commented out)
    assert problems == []
    assert settings.watch.stale_after == 600 and settings.notify.kind == "slack"
    assert settings.notify.webhook_url == SECRET_URL
    text = EXAMPLE.read_text()
    for key in KNOWN_KEYS:
        name = key.split(".", 1)[1]
        assert re.search(rf"^#? ?{name} = ", text, re.MULTILINE), f"{key} missing from the example"


def test_defaults_without_any_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = load_settings(None, env={})
    assert settings == Settings(watch=settings.watch, notify=NotifySettings(), source=None)
    assert settings.watch.min_runtime == 600
    assert settings.notify.enabled is False


def test_state_files_default_to_a_hidden_dir_of_report_dir(tmp_path: Path) -> None:
    path = write(tmp_path, '[watch]\nreport_dir = "reports"\n')
    watch = load_settings(path, env={}).watch
    assert watch.report_dir == tmp_path / "reports"  # relative to the config file
    assert watch.state_db == tmp_path / "reports" / ".slurmdiag" / "watch.db"
    assert watch.heartbeat_file == tmp_path / "reports" / ".slurmdiag" / "heartbeat.json"
    assert watch.lock_file == tmp_path / "reports" / ".slurmdiag" / "watch.db.lock"


def test_precedence_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = write(tmp_path, '[watch]\nstale_after = "10m"\nmin_runtime = "5m"\npartitions = ["a"]\n')
    env = {"SLURMDIAG_WATCH_STALE_AFTER": "20m", "SLURMDIAG_WATCH_PARTITIONS": "gpu, gpu-long"}
    settings = load_settings(path, env=env, overrides={"watch.min_runtime": "1m"})
    assert settings.watch.stale_after == 1200
    assert settings.watch.min_runtime == 60
    assert settings.watch.partitions == ("gpu", "gpu-long")


def test_config_file_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "[watch]\nmin_nodes = 4\n")
    assert load_settings(None, env={"SLURMDIAG_CONFIG": str(path)}).watch.min_nodes == 4


def test_check_reports_every_unknown_key_and_bad_value_at_once(tmp_path: Path) -> None:
    # GIVEN a config with typos and bad values in both sections
    path = write(
        tmp_path,
        """
[wacth]
x = 1

[watch]
stale_afte = "10m"
min_runtime = "ten minutes"
confirm_samples = 1
min_nodes = "two"
notify_recovered = "maybe"
report_url_base = "ftp://example.org"
kind = "slack"

[notify]
kind = "slak"
retries = -1
""",
    )
    # WHEN checked
    problems = check_config(path, env={})
    found = {p.key: p.message for p in problems}
    # THEN each problem is listed with its key path, unknown keys with a suggestion
    assert "did you mean 'watch'" in found["wacth"]
    assert "did you mean 'stale_after'" in found["watch.stale_afte"]
    assert "it belongs in [notify]" in found["watch.kind"]
    assert "not a duration" in found["watch.min_runtime"]
    assert "at least 2" in found["watch.confirm_samples"]
    assert "integer" in found["watch.min_nodes"]
    assert "true or false" in found["watch.notify_recovered"]
    assert "http" in found["watch.report_url_base"]
    assert "did you mean 'slack'" in found["notify.kind"]
    assert "at least 0" in found["notify.retries"]
    assert all(p.severity == "error" for p in problems)
    # AND loading refuses it, naming them all
    with pytest.raises(ConfigError) as info:
        load_settings(path, env={})
    for key in ("watch.stale_afte", "watch.min_runtime", "notify.retries"):
        assert key in info.value.message


def test_webhook_url_is_never_shown(tmp_path: Path) -> None:
    # GIVEN a bad webhook URL and a good one
    bad = write(tmp_path, '[notify]\nkind = "slack"\nwebhook_url = "hooks/T0SECRET xoxSECRET"\n')
    good = write(tmp_path, f'[notify]\nkind = "slack"\nwebhook_url = "{SECRET_URL}"\n', "ok.toml")
    # THEN neither problems, errors, repr nor the JSON view carry them
    problems = check_config(bad, env={})
    assert [p.key for p in problems] == ["notify.webhook_url"]
    assert "SECRET" not in str(problems)
    with pytest.raises(ConfigError) as info:
        load_settings(bad, env={})
    assert "SECRET" not in str(info.value)
    settings = load_settings(good, env={})
    assert settings.notify.webhook_url == SECRET_URL
    assert "SECRET" not in repr(settings)
    assert "SECRET" not in str(settings.to_dict())


def test_webhook_from_a_named_environment_variable(tmp_path: Path) -> None:
    path = write(tmp_path, '[notify]\nkind = "teams"\nwebhook_url_env = "CHAT_HOOK"\n')
    assert load_settings(path, env={"CHAT_HOOK": SECRET_URL}).notify.webhook_url == SECRET_URL
    # Unset: a warning for `config check` (cron may set it), an error for a real run.
    (problem,) = check_config(path, env={})
    assert problem.severity == "warning" and "CHAT_HOOK" in problem.message
    with pytest.raises(ConfigError):
        load_settings(path, env={})


def test_kind_without_url_and_url_without_kind(tmp_path: Path) -> None:
    only_kind = write(tmp_path, '[notify]\nkind = "slack"\n')
    assert [p.key for p in check_config(only_kind, env={})] == ["notify.webhook_url"]
    only_url = write(tmp_path, f'[notify]\nwebhook_url = "{SECRET_URL}"\n', "b.toml")
    assert [p.key for p in check_config(only_url, env={})] == ["notify.kind"]


def test_unreadable_files(tmp_path: Path) -> None:
    (missing,) = check_config(tmp_path / "nope.toml", env={})
    assert "no such file" in missing.message
    broken = write(tmp_path, "[watch\nstale_after = 1\n")
    (syntax,) = check_config(broken, env={})
    assert "invalid TOML" in syntax.message and "line 1" in syntax.message
    with pytest.raises(ConfigError):
        load_settings(tmp_path / "nope.toml", env={})


def test_cli_config_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = write(tmp_path, '[watch]\nstale_afte = "1m"\ncooldown = "soon"\n')
    assert main(["config", "check", str(bad)]) == 7
    err = capsys.readouterr().err
    assert "watch.stale_afte: unknown key (did you mean 'stale_after'?)" in err
    assert "watch.cooldown:" in err
    good = write(tmp_path, '[watch]\nstale_after = "1m"\n', "good.toml")
    assert main(["config", "check", str(good)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "OK" in captured.err


def test_cli_config_show_is_json_on_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    path = write(tmp_path, f'[notify]\nkind = "slack"\nwebhook_url = "{SECRET_URL}"\n')
    assert main(["config", "show", "--config", str(path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["notify"]["webhook_url"] == "<redacted>"


@pytest.mark.parametrize("value", ["10", 10, 2.5])
def test_bare_number_duration_says_it_was_taken_as_seconds(tmp_path: Path, value: object) -> None:
    # GIVEN a duration without a unit (Slurm reads bare numbers as minutes)
    text = f'"{value}"' if isinstance(value, str) else str(value)
    path = write(tmp_path, f"[watch]\nstale_after = {text}\n")
    # THEN it is taken as seconds (backward compatible) and a warning says so, with both spellings
    settings = load_settings(path)
    assert settings.watch.stale_after == float(value)
    (warning,) = settings.warnings
    assert warning.startswith("watch.stale_after: ") and "taken as" in warning
    assert "seconds" in warning and "minutes" in warning
    assert [p.severity for p in check_config(path)] == ["warning"]
    # A unit leaves nothing to say.
    assert load_settings(write(tmp_path, '[watch]\nstale_after = "10m"\n')).warnings == ()

"""Job-controlled text in chat messages and on stderr (issue 12 point 7), posted to a real server."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from support.webhook import WebhookServer
from test_notify import HANG, stuck_alert

from slurmdiag.config import NotifySettings
from slurmdiag.snapshot import Verdict
from slurmdiag.watch.notify import Alert, notify

FAKE_HEADING = "train\n#### :white_check_mark: Job 4242 recovered"
MENTIONS = "x @channel @all @here @ChAnNeL"


@pytest.fixture()
def webhook() -> Iterator[WebhookServer]:
    with WebhookServer() as server:
        yield server


def _post(kind: str, alert: Alert, server: WebhookServer) -> dict[str, Any]:
    result = notify(alert, NotifySettings(kind=kind, webhook_url=server.url), retries=0)
    assert result.ok, result.error
    return server.delivered[-1]


def _live_mentions(text: str) -> list[str]:
    return re.findall(r"(?<![\w@])@(?:channel|all|here)\b", text, re.IGNORECASE)


def test_mattermost_mentions_in_a_job_name_are_neutralised(webhook: WebhookServer) -> None:
    # GIVEN a job named to ping the whole channel, and a verdict summary quoting it
    alert = stuck_alert(job_name=MENTIONS, user="@all",
                        verdicts=(Verdict(kind="straggler", severity="critical",
                                          summary=f"rank 1 in {MENTIONS}",
                                          sites=("@here/train.py:3",)),))
    # WHEN the alert is posted to Mattermost
    text = _post("mattermost", alert, webhook)["text"]
    # THEN no @channel/@all/@here is left live, while the name is still readable
    assert _live_mentions(text) == []
    assert "channel" in text and "here" in text


def test_mattermost_newlines_in_a_job_name_cannot_fake_a_heading(webhook: WebhookServer) -> None:
    alert = stuck_alert(job_name=FAKE_HEADING, partition="gpu\n\n# fake")
    text = _post("mattermost", alert, webhook)["text"]
    headings = [line for line in text.splitlines() if line.lstrip().startswith("#")]
    assert len(headings) == 1 and "looks stuck" in headings[0]


def test_teams_markdown_links_in_a_job_name_are_escaped(webhook: WebhookServer) -> None:
    # GIVEN a job named with a Markdown link to a phishing page
    link = "[Open report](https://evil.example/login)"
    alert = stuck_alert(job_name=link, user=link,
                        verdicts=(Verdict(kind="straggler", severity="critical",
                                          summary=f"waits in {link}"),))
    # WHEN it is posted to Teams
    card = json.dumps(_post("teams", alert, webhook))
    # THEN no Markdown link survives in any text of the card
    texts = json.dumps(card)
    assert "](https://evil" not in texts and "](" not in texts
    assert "evil.example" in texts  # still shown, as text


def test_slack_fields_stay_within_2000_characters_after_escaping(webhook: WebhookServer) -> None:
    # GIVEN a job name of 3,000 '<' (each escapes to 4 characters)
    alert = stuck_alert(job_name="<" * 3000, user="&" * 3000,
                        verdicts=(Verdict(kind="straggler", severity="critical",
                                          summary="<" * 5000, sites=("<" * 5000 + ".py:1",),
                                          next_step=">" * 5000),))
    payload = _post("slack", alert, webhook)
    # THEN every field is at most 2,000 and every section text at most 3,000 characters,
    # and no escape is cut in half
    for block in payload["blocks"]:
        for field in block.get("fields", ()):
            assert len(field["text"]) <= 2000
            assert not re.search(r"&(a|am|l|g)?$", field["text"])
        if "text" in block and block["type"] == "section":
            assert len(block["text"]["text"]) <= 3000
    assert len(payload["blocks"][0]["text"]["text"]) <= 150


def test_control_characters_of_a_job_name_never_reach_chat(webhook: WebhookServer) -> None:
    alert = stuck_alert(job_name="a\x1b[2Jb\rc\u202ed")
    for kind in ("slack", "mattermost", "teams"):
        body = json.dumps(_post(kind, alert, webhook), ensure_ascii=False)
        assert "\x1b" not in body and "\r" not in body and "\u202e" not in body


def test_a_normal_alert_is_unchanged() -> None:
    # The neutralising leaves ordinary text alone (the HANG verdict of test_notify)
    assert HANG.summary in json.dumps(stuck_alert().to_dict())


# ---------------------------------------------------------------- stderr


def test_watchdog_stderr_escapes_control_characters_of_job_names(capsys) -> None:
    from slurmdiag.watch import cli_support, watchdog

    watchdog._log_to_stderr("job 1 (evil\x1b]0;pwned\x07\nwatch: job 2 stuck)")
    cli_support._err("watch: job 1 (\x1b[31mred\u202e)")
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err and "\u202e" not in err
    assert err.count("\n") == 2  # one line each: the newline of the name is escaped

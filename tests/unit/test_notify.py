"""Chat messages (pure) per kind, and posting them to a real HTTP server on loopback."""

from __future__ import annotations

import email.utils
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.webhook import SECRET_PATH, WebhookServer, closed_port_url

from slurmdiag.config import NotifySettings
from slurmdiag.snapshot import Verdict
from slurmdiag.watch.notify import (
    Alert,
    build_payload,
    compact_ranks,
    mattermost_payload,
    notify,
    parse_retry_after,
    plain_text,
    send_payload,
    slack_payload,
    teams_payload,
    webhook_payload,
)


@pytest.fixture
def webhook() -> Iterator[WebhookServer]:
    with WebhookServer() as server:
        yield server


# --------------------------------------------------------------------------------------------
# Messages (pure)
# --------------------------------------------------------------------------------------------

HANG = Verdict(
    kind="mismatched_collective",
    severity="critical",
    summary="rank 3 waits in all_reduce at train.py:88 while ranks 0-2,4-7 wait in barrier",
    culprit_ranks=(3,),
    sites=("/home/alice/proj/train.py:88",),
    next_step="keep the collective outside the rank-gated branch",
)


def stuck_alert(**changes: Any) -> Alert:
    values: dict[str, Any] = {
        "event": "stuck",
        "job_id": "4242",
        "job_name": "llm-pretrain",
        "user": "alice",
        "partition": "gpu",
        "nodes": ("node001", "node002", "node003", "node004"),
        "verdicts": (HANG,),
        "report_url": "https://reports.example.org/4242/20260101T000000Z/report.html",
        "report_path": "/var/lib/slurmdiag/reports/4242/20260101T000000Z/report.html",
        "quiet_for_s": 900.0,
        "run_time_s": 7200.0,
        "cluster": "gpu-cluster",
    }
    values.update(changes)
    return Alert(**values)


def test_slack_payload_has_text_and_blocks_with_culprit_site_and_link() -> None:
    # GIVEN a stuck job alert  WHEN the Slack payload is built
    payload = slack_payload(stuck_alert())
    # THEN it is an incoming-webhook body: fallback text plus blocks
    assert set(payload) == {"text", "blocks"}
    assert "4242" in payload["text"] and "llm-pretrain" in payload["text"]
    blob = json.dumps(payload["blocks"])
    assert "Culprit ranks: *3*" in blob
    assert "train.py:88" in blob
    assert "node[001-004]" in blob
    assert "alice" in blob
    buttons = [b for b in payload["blocks"] if b["type"] == "actions"]
    assert buttons[0]["elements"][0]["url"] == stuck_alert().report_url
    assert payload["blocks"][0]["type"] == "header"
    assert len(payload["blocks"][0]["text"]["text"]) <= 150  # Slack's header limit


def test_slack_escapes_control_characters_of_user_text() -> None:
    # GIVEN a job name that would ping the whole channel
    payload = slack_payload(stuck_alert(job_name="<!channel> & co"))
    # THEN it arrives as text
    assert "<!channel>" not in payload["text"]
    assert "&lt;!channel&gt; &amp; co" in payload["text"]


def test_mattermost_payload_is_markdown_text() -> None:
    payload = mattermost_payload(stuck_alert(job_name="run_*1*"))
    assert set(payload) == {"text"}
    text = payload["text"]
    assert "Culprit ranks: **3**" in text
    assert "`/home/alice/proj/train.py:88`" in text
    assert f"[Open report]({stuck_alert().report_url})" in text
    assert "run\\_\\*1\\*" in text  # markdown in a job name is shown, not interpreted


def test_teams_payload_is_an_adaptive_card_in_a_message_envelope() -> None:
    payload = teams_payload(stuck_alert())
    assert payload["type"] == "message"
    (attachment,) = payload["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.4"
    facts = {
        f["title"]: f["value"] for b in card["body"] if b["type"] == "FactSet" for f in b["facts"]
    }
    assert facts["Job"] == "4242" and facts["User"] == "alice"
    assert any("culprit rank 3" in b.get("text", "") for b in card["body"])
    assert card["actions"][0] == {
        "type": "Action.OpenUrl",
        "title": "Open report",
        "url": stuck_alert().report_url,
    }


def test_generic_webhook_payload_carries_structured_fields() -> None:
    payload = webhook_payload(stuck_alert())
    assert payload["event"] == "stuck_job"
    assert payload["job"]["id"] == "4242"
    assert payload["job"]["nodes"] == ["node001", "node002", "node003", "node004"]
    assert payload["verdicts"][0]["culprit_ranks"] == [3]
    assert payload["verdicts"][0]["sites"] == ["/home/alice/proj/train.py:88"]
    assert payload["report_url"] == stuck_alert().report_url
    recovered = webhook_payload(stuck_alert(event="recovered", verdicts=(), reason="job ended"))
    assert recovered["event"] == "job_recovered" and recovered["reason"] == "job ended"


def test_without_report_url_the_path_is_shown() -> None:
    alert = stuck_alert(report_url=None)
    assert alert.report_path is not None
    for kind in ("slack", "mattermost", "teams", "webhook"):
        assert alert.report_path in json.dumps(build_payload(kind, alert))


def test_compact_ranks_and_plain_text() -> None:
    assert compact_ranks((0, 1, 2, 3, 5, 7, 8)) == "0-3,5,7-8"
    text = plain_text(stuck_alert(verdicts=(HANG,) * 5))
    assert text.count("mismatched_collective") == 3  # chat messages stay short
    assert "No output for: 15m" in text


def test_alert_round_trips_through_json() -> None:
    alert = stuck_alert()
    assert Alert.from_dict(json.loads(json.dumps(alert.to_dict()))) == alert


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError):
        build_payload("irc", stuck_alert())


# --------------------------------------------------------------------------------------------
# Sending to a real server
# --------------------------------------------------------------------------------------------


def test_post_is_json_and_succeeds_first_time(webhook: WebhookServer) -> None:
    result = send_payload(webhook.url, {"text": "hello"}, retries=2, backoff=0.01)
    assert result.ok and result.attempts == 1 and result.status == 200
    assert webhook.requests[0]["path"] == SECRET_PATH
    assert webhook.requests[0]["content_type"].startswith("application/json")
    assert webhook.delivered == [{"text": "hello"}]


def test_500_then_200_is_retried_and_delivered_once() -> None:
    with WebhookServer(statuses=[500]) as server:
        result = send_payload(server.url, {"text": "x"}, retries=3, backoff=0.05)
    assert result.ok and result.attempts == 2
    assert [r["status"] for r in server.requests] == [500, 200]
    assert len(server.delivered) == 1
    assert result.history == ("HTTP 500 Internal Server Error",)


def test_4xx_is_not_retried_and_the_url_is_not_in_the_error() -> None:
    with WebhookServer(statuses=[404]) as server:
        result = send_payload(server.url, {"text": "x"}, retries=3, backoff=0.01)
    assert not result.ok and result.attempts == 1 and result.status == 404
    assert len(server.requests) == 1
    assert "SECRET" not in repr(result)


def test_429_is_retried() -> None:
    with WebhookServer(statuses=[429, 429]) as server:
        result = send_payload(server.url, {"text": "x"}, retries=3, backoff=0.01)
    assert result.ok and result.attempts == 3


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_seconds_is_honoured(status: int) -> None:
    # GIVEN a real server that answers 429/503 with Retry-After: 1, then 200
    with WebhookServer(statuses=[(status, {"Retry-After": "1"})]) as server:
        result = send_payload(server.url, {"text": "x"}, retries=3, backoff=0.01, max_time=10)
    # THEN the second post waited the server's second, not our 10 ms backoff
    assert result.ok and result.attempts == 2
    first, second = server.requests
    assert second["time"] - first["time"] >= 0.95


def test_retry_after_http_date_is_honoured() -> None:
    when = email.utils.formatdate(time.time() + 2, usegmt=True)  # whole seconds: 1-2 s away
    with WebhookServer(statuses=[(429, {"Retry-After": when})]) as server:
        result = send_payload(server.url, {"text": "x"}, retries=3, backoff=0.01, max_time=10)
    assert result.ok and result.attempts == 2
    assert server.requests[1]["time"] - server.requests[0]["time"] >= 0.9


def test_retry_after_beyond_max_time_gives_up_at_once_and_says_why() -> None:
    with WebhookServer(statuses=[(429, {"Retry-After": "120"})]) as server:
        started = time.monotonic()
        result = send_payload(server.url, {"text": "x"}, retries=3, backoff=0.01, max_time=5)
    assert not result.ok and result.attempts == 1 and time.monotonic() - started < 2
    assert "Retry-After 120 s is past notify.max_time" in (result.error or "")


def test_parse_retry_after() -> None:
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


def test_unreachable_webhook_fails_within_the_bound_without_leaking_the_url() -> None:
    # GIVEN a port nobody listens on
    url = closed_port_url()
    started = time.monotonic()
    # WHEN posting with retries
    result = send_payload(url, {"text": "x"}, retries=3, max_time=5.0, backoff=0.05)
    # THEN every attempt is made quickly, the result says why, and nothing names the URL
    assert time.monotonic() - started < 5.0
    assert not result.ok and result.unreachable and result.attempts == 4
    assert result.error is not None and "connection failed" in result.error
    assert "SECRET" not in repr(result) and "127.0.0.1" not in repr(result)


def test_slow_webhook_is_bounded_by_max_time() -> None:
    with WebhookServer(delay_s=2.0) as server:
        started = time.monotonic()
        result = send_payload(server.url, {"text": "x"}, timeout=0.3, retries=10, max_time=1.5)
        elapsed = time.monotonic() - started
    assert not result.ok and result.error is not None and "timed out" in result.error
    assert elapsed < 2.5


def test_redirect_is_not_followed() -> None:
    with WebhookServer(statuses=[302]) as server:
        result = send_payload(server.url, {"text": "x"}, retries=2, backoff=0.01)
    assert not result.ok and result.status == 302 and len(server.requests) == 1


def test_notify_uses_the_configured_kind(webhook: WebhookServer) -> None:
    settings = NotifySettings(kind="mattermost", webhook_url=webhook.url, retries=0)
    result = notify(stuck_alert(), settings)
    assert result.ok
    assert set(webhook.delivered[0]) == {"text"}
    assert "SECRET" not in repr(settings)


def test_notify_without_a_webhook_is_a_result_not_an_exception() -> None:
    result = notify(stuck_alert(), NotifySettings())
    assert not result.ok and result.attempts == 0

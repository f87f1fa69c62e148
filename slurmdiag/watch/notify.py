"""Team-chat notifications: build the message (pure) per kind, and post it (urllib, stdlib).

Kinds: ``slack`` (incoming webhook: ``{"text", "blocks"}``), ``mattermost`` (``{"text"}`` in
Markdown), ``teams`` (Workflows webhook: an Adaptive Card in a ``message`` envelope) and
``webhook`` (generic JSON: ``{"event", "job", "verdicts", "report_url", ...}``).

``send_payload`` retries with exponential backoff on timeouts, connection errors, 429 and 5xx (not
on other 4xx; a 429 or 503 with ``Retry-After`` waits as told), inside a bounded total time, and returns a ``SendResult``: it never raises into the
run. The webhook URL is a secret (it *is* the credential for Slack, Mattermost and Teams): no
result, message, log line or exception text carries it.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from slurmdiag._version import __version__
from slurmdiag.config import NotifySettings, format_duration
from slurmdiag.hostlist import compress_hostlist, format_int_ranges
from slurmdiag.snapshot import Verdict

EVENTS = ("stuck", "recovered")
_MAX_VERDICTS = 3
_MAX_TEXT = 600  # per verdict summary; chat messages are read on phones
_MAX_NODES_TEXT = 200


@dataclass(frozen=True)
class Alert:
    """What a notification says, independent of the chat system (stored as JSON for retries)."""

    event: str  # stuck | recovered | postmortem
    job_id: str
    job_name: str | None = None
    user: str | None = None
    partition: str | None = None
    nodes: tuple[str, ...] = ()
    verdicts: tuple[Verdict, ...] = ()
    report_url: str | None = None
    report_path: str | None = None
    quiet_for_s: float | None = None  # no StdOut/StdErr growth for this long
    run_time_s: float | None = None
    cluster: str | None = None
    reason: str | None = None  # recovered: "output resumed", "job ended", "stacks moving"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["nodes"] = list(self.nodes)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Alert:
        verdicts = tuple(
            Verdict(
                kind=v["kind"],
                severity=v["severity"],
                summary=v["summary"],
                culprit_ranks=tuple(v.get("culprit_ranks") or ()),
                sites=tuple(v.get("sites") or ()),
                evidence=tuple(v.get("evidence") or ()),
                next_step=v.get("next_step"),
            )
            for v in data.get("verdicts") or ()
        )
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["nodes"] = tuple(known.get("nodes") or ())
        known["verdicts"] = verdicts
        return cls(**known)


# --------------------------------------------------------------------------------------------
# Pure text helpers
# --------------------------------------------------------------------------------------------


def compact_ranks(ranks: Sequence[int]) -> str:
    """``(0, 1, 2, 5)`` -> ``"0-2,5"``."""
    try:
        return format_int_ranges(ranks)
    except ValueError:
        return ",".join(str(r) for r in ranks)


def compact_nodes(nodes: Sequence[str], limit: int = _MAX_NODES_TEXT) -> str:
    text = compress_hostlist(nodes) if nodes else ""
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def _clip(text: str, limit: int = _MAX_TEXT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def ordered_verdicts(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The verdicts a chat message shows: the first few, in the order the watchdog ranked them."""
    return list(verdicts)[:_MAX_VERDICTS]


def title(alert: Alert) -> str:
    where = f" on {alert.cluster}" if alert.cluster else ""
    name = f" ({alert.job_name})" if alert.job_name else ""
    if alert.event == "recovered":
        reason = f": {alert.reason}" if alert.reason else ""
        return f"Job {alert.job_id}{name}{where} recovered{reason}"
    if alert.event == "postmortem":
        return f"Job {alert.job_id}{name}{where} ended: post-mortem ({alert.reason or 'failed'})"
    return f"Job {alert.job_id}{name}{where} looks stuck"


def _facts(alert: Alert) -> list[tuple[str, str]]:
    facts = [("Job", alert.job_id)]
    if alert.job_name:
        facts.append(("Name", alert.job_name))
    if alert.user:
        facts.append(("User", alert.user))
    if alert.partition:
        facts.append(("Partition", alert.partition))
    if alert.nodes:
        facts.append(("Nodes", f"{compact_nodes(alert.nodes)} ({len(alert.nodes)})"))
    if alert.quiet_for_s is not None and alert.event == "stuck":
        facts.append(("No output for", format_duration(round(alert.quiet_for_s))))
    if alert.run_time_s is not None:
        facts.append(("Run time", format_duration(round(alert.run_time_s))))
    return facts


def _verdict_line(verdict: Verdict) -> tuple[str, str, str]:
    """(kind and severity, summary, culprits and sites) of one verdict, as plain text."""
    head = f"{verdict.kind} ({verdict.severity})"
    parts = []
    if verdict.culprit_ranks:
        label = "rank" if len(verdict.culprit_ranks) == 1 else "ranks"
        parts.append(f"culprit {label} {compact_ranks(verdict.culprit_ranks)}")
    if verdict.sites:
        parts.append("at " + ", ".join(verdict.sites[:3]))
    return head, _clip(verdict.summary), "; ".join(parts)


def plain_text(alert: Alert) -> str:
    """One readable paragraph without markup (Slack fallback text, logs, tests)."""
    lines = [title(alert)]
    for verdict in ordered_verdicts(alert.verdicts):
        head, summary, culprits = _verdict_line(verdict)
        lines.append(f"{head}: {summary}" + (f" [{culprits}]" if culprits else ""))
    lines.append(", ".join(f"{k}: {v}" for k, v in _facts(alert)))
    if alert.report_url:
        lines.append(f"Report: {alert.report_url}")
    elif alert.report_path:
        lines.append(f"Report: {alert.report_path}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Per-kind payloads
# --------------------------------------------------------------------------------------------


def _slack_escape(text: str) -> str:
    # Slack mrkdwn: only these three are control characters; the rest is shown as is.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_SLACK_FIELD_MAX = 2000  # Slack refuses a section field longer than this (after escaping)
_SLACK_SECTION_MAX = 3000


def _slack_clip(text: str, limit: int) -> str:
    """``_slack_escape(text)`` in at most ``limit`` characters, never cutting an escape."""
    escaped = _slack_escape(text)
    if len(escaped) <= limit:
        return escaped
    out: list[str] = []
    used = 0
    for ch in text:
        piece = _slack_escape(ch)
        if used + len(piece) > limit - 1:
            break
        out.append(piece)
        used += len(piece)
    return "".join(out) + "…"


def _code(text: str) -> str:
    """Inline code that a backtick in a job name or path cannot break out of."""
    return "`" + text.replace("`", "'") + "`"


def slack_payload(alert: Alert) -> dict[str, Any]:
    icon = ":white_check_mark:" if alert.event == "recovered" else ":rotating_light:"
    heading = _clip(f"{title(alert)}", 148)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": heading, "emoji": True}}
    ]
    fields = [
        {"type": "mrkdwn", "text": f"*{k}*\n{_slack_clip(v, _SLACK_FIELD_MAX - len(k) - 3)}"}
        for k, v in _facts(alert)[:10]
    ]
    blocks.append({"type": "section", "fields": fields})
    for verdict in ordered_verdicts(alert.verdicts):
        _, summary, _ = _verdict_line(verdict)
        kind = _code(_slack_clip(verdict.kind, 100))
        text = f"*{kind}* ({_slack_clip(verdict.severity, 20)})\n{_slack_clip(summary, 1500)}"
        if verdict.culprit_ranks:
            text += f"\nCulprit ranks: *{_slack_clip(compact_ranks(verdict.culprit_ranks), 200)}*"
        if verdict.sites:
            text += "\nSite: " + ", ".join(_code(_slack_clip(s, 250)) for s in verdict.sites[:3])
        if verdict.next_step:
            text += f"\nNext: {_slack_clip(_clip(verdict.next_step, 300), 400)}"
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text}})
    if alert.report_url:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "text": {"type": "plain_text", "text": "Open report"},
                        "url": alert.report_url,
                    }
                ],
            }
        )
    elif alert.report_path:
        blocks.append(
            {
                "type": "context",
                "elements": [
                    {"type": "mrkdwn",
                     "text": f"Report: {_code(_slack_clip(alert.report_path, 1900))}"}
                ],
            }
        )
    fallback = f"{icon} {_slack_escape(plain_text(alert))}"
    return {"text": fallback, "blocks": blocks}


# Only what formats text mid-line (emphasis, code, links, tables, HTML): escaping more leaves
# backslashes in the plain-text push notifications Mattermost sends to phones.
_MD_SPECIAL = "\\`*_[]|<>~"


# A mention in job text (@channel, @all, @here, @someone) would ping people: a zero-width space
# after the '@' keeps it readable and inert.
_MENTION = re.compile(r"@(?=\w)")
_ZWSP = "\u200b"


def _md_escape(text: str) -> str:
    escaped = "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in text)
    return _MENTION.sub("@" + _ZWSP, escaped)


def _md_code(text: str) -> str:
    return _MENTION.sub("@" + _ZWSP, _code(text))


def mattermost_payload(alert: Alert) -> dict[str, Any]:
    icon = ":white_check_mark:" if alert.event == "recovered" else ":rotating_light:"
    lines = [f"#### {icon} {_md_escape(title(alert))}"]
    for verdict in ordered_verdicts(alert.verdicts):
        _, summary, _ = _verdict_line(verdict)
        line = f"**{_md_code(verdict.kind)}** ({_md_escape(verdict.severity)}): {_md_escape(summary)}"
        if verdict.culprit_ranks:
            line += f"  \nCulprit ranks: **{_md_escape(compact_ranks(verdict.culprit_ranks))}**"
        if verdict.sites:
            line += "  \nSite: " + ", ".join(_md_code(s) for s in verdict.sites[:3])
        if verdict.next_step:
            line += f"  \nNext: {_md_escape(_clip(verdict.next_step, 300))}"
        lines.append(line)
    lines.append("| | |\n|:--|:--|")
    lines[-1] += "".join(f"\n| {k} | {_md_escape(v)} |" for k, v in _facts(alert))
    if alert.report_url:
        lines.append(f"[Open report]({alert.report_url.replace(')', '%29')})")
    elif alert.report_path:
        lines.append(f"Report: {_md_code(alert.report_path)}")
    return {"text": "\n\n".join(lines)}


# Adaptive Card text is Markdown (links, emphasis): job text must not become a link to
# anywhere. Backslash escapes are not rendered by every Teams client, so link and emphasis
# syntax is broken with a zero-width space instead, which keeps the text readable
# (an underscore inside a word, as in mismatched_collective, emphasises nothing).
_TEAMS_BREAK = re.compile(r"([\[\]()*~`#>]|(?<!\w)_|_(?!\w))")  # '_' inside a word is text


def _teams_text(text: str) -> str:
    return _TEAMS_BREAK.sub(lambda m: m.group(1) + _ZWSP, text)


def teams_payload(alert: Alert) -> dict[str, Any]:
    """An Adaptive Card in the envelope a Teams Workflows 'post to a channel' webhook expects."""
    color = "Good" if alert.event == "recovered" else "Attention"
    body: list[dict[str, Any]] = [
        {
            "type": "TextBlock",
            "text": _teams_text(title(alert)),
            "weight": "Bolder",
            "size": "Medium",
            "color": color,
            "wrap": True,
        },
        {"type": "FactSet", "facts": [{"title": k, "value": _teams_text(v)} for k, v in _facts(alert)]},
    ]
    for verdict in ordered_verdicts(alert.verdicts):
        head, summary, culprits = _verdict_line(verdict)
        body.append({"type": "TextBlock", "text": _teams_text(head), "weight": "Bolder", "wrap": True})
        body.append({"type": "TextBlock", "text": _teams_text(summary), "wrap": True})
        if culprits:
            body.append({"type": "TextBlock", "text": _teams_text(culprits), "wrap": True, "isSubtle": True})
    card: dict[str, Any] = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": body,
    }
    if alert.report_url:
        card["actions"] = [
            {"type": "Action.OpenUrl", "title": "Open report", "url": alert.report_url}
        ]
    elif alert.report_path:
        body.append({"type": "TextBlock", "text": f"Report: {_teams_text(alert.report_path)}", "wrap": True})
    return {
        "type": "message",
        "attachments": [
            {
                "contentType": "application/vnd.microsoft.card.adaptive",
                "contentUrl": None,
                "content": card,
            }
        ],
    }


def webhook_payload(alert: Alert) -> dict[str, Any]:
    """Generic JSON for anything else (PagerDuty bridges, ticket systems, your own bot)."""
    return {
        "event": {"stuck": "stuck_job", "postmortem": "job_postmortem"}.get(alert.event, "job_recovered"),
        "job": {
            "id": alert.job_id,
            "name": alert.job_name,
            "user": alert.user,
            "partition": alert.partition,
            "nodes": list(alert.nodes),
            "nodes_compact": compress_hostlist(alert.nodes) if alert.nodes else "",
            "cluster": alert.cluster,
            "run_time_s": alert.run_time_s,
            "quiet_for_s": alert.quiet_for_s,
        },
        "verdicts": [
            {
                "kind": v.kind,
                "severity": v.severity,
                "summary": v.summary,
                "culprit_ranks": list(v.culprit_ranks),
                "culprit_ranks_compact": compact_ranks(v.culprit_ranks),
                "sites": list(v.sites),
                "next_step": v.next_step,
            }
            for v in alert.verdicts
        ],
        "reason": alert.reason,
        "report_url": alert.report_url,
        "report_path": alert.report_path,
        "text": plain_text(alert),
        "slurmdiag_version": __version__,
    }


_BUILDERS: dict[str, Callable[[Alert], dict[str, Any]]] = {
    "slack": slack_payload,
    "mattermost": mattermost_payload,
    "teams": teams_payload,
    "webhook": webhook_payload,
}


def build_payload(kind: str, alert: Alert) -> dict[str, Any]:
    """The JSON body for ``kind`` (slack | mattermost | teams | webhook)."""
    try:
        builder = _BUILDERS[kind]
    except KeyError:
        raise ValueError(f"unknown notification kind {kind!r}") from None
    return builder(flattened(alert))


def _flat(text: str | None) -> str | None:
    """Job-controlled text on one line: no newline (a fake heading), no control character."""
    if text is None:
        return None
    return " ".join(_INVISIBLE.sub(" ", str(text)).split())


_INVISIBLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def flattened(alert: Alert) -> Alert:
    """The alert with every job-controlled text flattened (``_flat``) before any markup."""
    verdicts = tuple(
        replace(
            v,
            kind=_flat(v.kind) or "",
            severity=_flat(v.severity) or "",
            summary=_flat(v.summary) or "",
            sites=tuple(_flat(s) or "" for s in v.sites),
            evidence=tuple(_flat(e) or "" for e in v.evidence),
            next_step=_flat(v.next_step),
        )
        for v in alert.verdicts
    )
    return replace(
        alert,
        job_id=_flat(alert.job_id) or "",
        job_name=_flat(alert.job_name),
        user=_flat(alert.user),
        partition=_flat(alert.partition),
        nodes=tuple(_flat(n) or "" for n in alert.nodes),
        verdicts=verdicts,
        report_path=_flat(alert.report_path),
        cluster=_flat(alert.cluster),
        reason=_flat(alert.reason),
    )


# --------------------------------------------------------------------------------------------
# Sending
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SendResult:
    """How a post went. ``error`` is safe to log and store: it never contains the URL."""

    ok: bool
    attempts: int
    status: int | None = None
    error: str | None = None
    elapsed_s: float = 0.0
    # Connection refused or timed out: later posts of this run would fail the same way.
    unreachable: bool = False
    history: tuple[str, ...] = field(default=())


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A webhook that redirects is misconfigured: urllib would re-send the POST as a bodiless GET."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _scrub(text: str, url: str) -> str:
    """Remove the URL and its path/query from ``text`` (error texts can quote a request)."""
    parts = urllib.parse.urlsplit(url)
    for secret in (url, parts.path + (f"?{parts.query}" if parts.query else ""), parts.query):
        if secret and len(secret) > 1:
            text = text.replace(secret, "<webhook>")
    return text


def _describe_error(exc: BaseException) -> tuple[str, bool]:
    """(message, retryable) for an exception of urlopen; messages are built, never str(request)."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}", exc.code >= 500 or exc.code == 429
    if isinstance(exc, urllib.error.URLError):
        reason = exc.reason
        if isinstance(reason, (socket.timeout, TimeoutError)):
            return "timed out", True
        if isinstance(reason, OSError):
            return f"connection failed: {reason.strerror or type(reason).__name__}", True
        return f"connection failed: {reason}", True
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out", True
    if isinstance(exc, OSError):
        return f"connection failed: {exc.strerror or type(exc).__name__}", True
    return f"{type(exc).__name__}", False


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After``: delay-seconds (``120``) or an HTTP date -> seconds to wait (pure), or None."""
    if not value:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


def send_payload(
    url: str,
    payload: dict[str, Any],
    *,
    timeout: float = 10.0,
    retries: int = 3,
    max_time: float = 60.0,
    backoff: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> SendResult:
    """POST ``payload`` as JSON; retry transient failures with backoff within ``max_time`` seconds."""
    body = json.dumps(payload).encode()
    start = clock()
    deadline = start + max_time
    history: list[str] = []
    status: int | None = None
    unreachable = False
    attempts = 0
    for attempt in range(retries + 1):
        remaining = deadline - clock()
        if remaining <= 0:
            break
        attempts += 1
        request = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={
                "Content-Type": "application/json; charset=utf-8",
                "User-Agent": f"slurmdiag/{__version__}",
            },
        )
        try:
            with _OPENER.open(request, timeout=min(timeout, remaining)) as response:
                status = response.status
                response.read(65536)
            if 200 <= (status or 0) < 300:
                return SendResult(
                    True, attempts, status, None, clock() - start, False, tuple(history)
                )
            message, retryable = f"HTTP {status}", False
        except Exception as exc:  # noqa: BLE001 - every failure becomes data, never an exception
            message, retryable = _describe_error(exc)
            retry_after = None
            if isinstance(exc, urllib.error.HTTPError):
                if exc.code in (429, 503) and exc.headers is not None:
                    retry_after = parse_retry_after(exc.headers.get("Retry-After"))
                exc.close()
                status = exc.code
                unreachable = False
            else:
                status = None
                unreachable = retryable
        history.append(_scrub(message, url))
        if not retryable or attempt == retries:
            break
        # 429/503 with Retry-After: the server's wait, not ours, as long as max_time allows it.
        pause = backoff * (2**attempt) if retry_after is None else retry_after
        if clock() + pause >= deadline:
            if retry_after is not None:
                history[-1] += f" (Retry-After {retry_after:g} s is past notify.max_time)"
            break
        sleep(pause)
    error = history[-1] if history else "no attempt: time budget exhausted"
    if attempts and len(history) > 1:
        error = f"{error} (after {attempts} attempts)"
    return SendResult(False, attempts, status, error, clock() - start, unreachable, tuple(history))


def notify(alert: Alert, settings: NotifySettings, **send_options: Any) -> SendResult:
    """Build the payload for the configured kind and post it; a disabled notifier is an error result."""
    if not settings.enabled or settings.kind is None or settings.webhook_url is None:
        return SendResult(False, 0, None, "notifications are not configured")
    try:
        payload = build_payload(settings.kind, alert)
    except Exception as exc:  # noqa: BLE001 - a bad alert must not end the run
        return SendResult(False, 0, None, f"cannot build the message: {type(exc).__name__}: {exc}")
    options: dict[str, Any] = {
        "timeout": settings.timeout,
        "retries": settings.retries,
        "max_time": settings.max_time,
    }
    options.update(send_options)
    return send_payload(settings.webhook_url, payload, **options)

"""Rendering: Jinja2 templates shipped in the package, overridable from an operator directory.

Each kind has four templates: `<kind>.subject.j2` (one line), `<kind>.txt.j2` (email plain
part and Slack's notification fallback), `<kind>.html.j2` (email HTML part, autoescaped) and
`<kind>.slack.j2` (Slack mrkdwn; every `{{ value }}` is escaped for Slack).

Rendering happens when a message is sent, not when it is recorded, so "in 4 min" is true at
delivery, even after retries. The stored context is plain JSON; times are ISO strings.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jinja2 import (
    BaseLoader,
    ChoiceLoader,
    Environment,
    FileSystemLoader,
    PackageLoader,
    StrictUndefined,
    TemplateError,
)

log = logging.getLogger("rota.notifier.render")

_TIME_FORMAT = "%Y-%m-%d %H:%M %Z"


@dataclass(frozen=True)
class Rendered:
    subject: str
    text: str
    html: str
    slack: str


def slack_escape(value: Any) -> Any:
    """Slack's three control characters; everything a template prints goes through this."""
    if not isinstance(value, str):
        return value
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def human_duration(value: float) -> str:
    seconds = abs(round(value))
    if seconds < 60:
        return f"{seconds} s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min" + (f" {sec} s" if sec and minutes < 10 else "")
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(hours, 24)
    return f"{days} d" + (f" {hours} h" if hours else "")


def relative(at: datetime, now: datetime) -> str:
    delta = (at - now).total_seconds()
    if abs(delta) < 1:
        return "now"
    return f"in {human_duration(delta)}" if delta > 0 else f"{human_duration(delta)} ago"


def zone(name: str | None) -> ZoneInfo:
    try:
        return ZoneInfo(name or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        log.warning("unknown time zone %r; using UTC", name)
        return ZoneInfo("UTC")


def when(iso: str | None, tz: str | None, now: datetime) -> dict[str, str | None] | None:
    """An instant three ways: UTC, the reader's zone (None when that is UTC), and relative."""
    if not iso:
        return None
    at = datetime.fromisoformat(iso)
    local_zone = zone(tz)
    utc = at.astimezone(ZoneInfo("UTC")).strftime(_TIME_FORMAT)
    local = None
    if local_zone.key != "UTC":
        local = f"{at.astimezone(local_zone).strftime(_TIME_FORMAT)} ({local_zone.key})"
    return {"utc": utc, "local": local, "relative": relative(at, now)}


def template_context(ctx: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The stored context plus what is derived at send time."""
    tz = ctx.get("timezone")
    out = dict(ctx)
    for key in ("deadline", "eta", "occurred_at"):
        out[f"{key}_at"] = when(ctx.get(key), tz, now)
    for key in ("waited_s", "threshold_s", "grace_s"):
        value = ctx.get(key)
        out[key.removesuffix("_s") + "_human"] = human_duration(value) if value is not None else None
    return out


def _environment(loader: BaseLoader, *, html: bool = False, slack: bool = False) -> Environment:
    env = Environment(
        loader=loader, autoescape=html, undefined=StrictUndefined, trim_blocks=True,
        lstrip_blocks=True, keep_trailing_newline=True,
        finalize=slack_escape if slack else None,
    )
    env.filters["duration"] = human_duration
    return env


class Renderer:
    def __init__(self, override_dir: Path | None = None) -> None:
        builtin: BaseLoader = PackageLoader("rota_notifier", "templates")
        self._builtin = self._environments(builtin)
        self._override_dir = override_dir
        if override_dir is not None:
            self._primary = self._environments(
                ChoiceLoader([FileSystemLoader(str(override_dir)), builtin])
            )
        else:
            self._primary = self._builtin

    @staticmethod
    def _environments(loader: BaseLoader) -> dict[str, Environment]:
        return {
            "subject": _environment(loader), "txt": _environment(loader),
            "html": _environment(loader, html=True), "slack": _environment(loader, slack=True),
        }

    def _one(self, kind: str, part: str, values: dict[str, Any]) -> str:
        name = f"{kind}.{part}.j2"
        try:
            return self._primary[part].get_template(name).render(values).strip()
        except TemplateError as exc:
            if self._override_dir is None:
                raise
            # A broken operator template must not silence a preemption notice.
            log.warning("template %s from %s failed (%s); using the built-in one",
                        name, self._override_dir, exc)
            return self._builtin[part].get_template(name).render(values).strip()

    def subject(self, kind: str, ctx: dict[str, Any], now: datetime) -> str:
        """One line, at most 200 characters: also an email header, so no line breaks."""
        return " ".join(self._one(kind, "subject", template_context(ctx, now)).split())[:200]

    def render(self, kind: str, ctx: dict[str, Any], now: datetime) -> Rendered:
        values = template_context(ctx, now)
        subject = " ".join(self._one(kind, "subject", values).split())
        return Rendered(
            subject=subject[:200],
            text=self._one(kind, "txt", values),
            html=self._one(kind, "html", values),
            slack=self._one(kind, "slack", values),
        )

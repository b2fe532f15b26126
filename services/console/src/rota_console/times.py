"""Times as the console shows them: the clock time (which the page's script turns into the
viewer's local time) and how long ago, or how soon, as of the page. Prose from the API (a
job's summary, a timeline line, a reason) carries raw ISO times; `prose` shows those the same
way, so no `2026-12-07T13:20:11.123456+00:00` reaches a reader."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from markupsafe import Markup, escape

ISO_TIME = re.compile(
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2}| UTC)?")
"""An ISO 8601 time as the services write it (`isoformat()`, `Z`, or `... UTC`)."""


def parse_time(text: str) -> datetime | None:
    """The time `text` says, in UTC when it names no offset; None when it is not a time."""
    text = text.strip()
    if text.endswith(" UTC"):
        text = text[:-4] + "+00:00"
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def relative(at: datetime, now: datetime) -> str:
    """`3 min ago`, `in 2 h`, `just now`: the distance between `at` and `now`, rounded."""
    seconds = (at - now).total_seconds()
    size = abs(seconds)
    if size < 5:
        return "just now"
    if size < 90:
        amount = f"{size:.0f} s"
    elif size < 5400:
        amount = f"{size / 60:.0f} min"
    elif size < 2 * 86400:
        amount = f"{size / 3600:.1f} h".replace(".0 h", " h")
    else:
        amount = f"{size / 86400:.0f} days"
    return f"in {amount}" if seconds > 0 else f"{amount} ago"


def time_html(value: datetime | str | None, now: datetime | None = None) -> Markup:
    """`<time>` with the UTC clock time (the script shows it in local time) and, with `now`,
    how long ago or how soon; a dash for no time."""
    at = parse_time(value) if isinstance(value, str) else value
    if at is None:
        return Markup("\u2013")  # an en dash, as the templates show no time
    at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    utc = at.astimezone(UTC)
    shown = Markup('<time datetime="{iso}" title="{full}">{clock}</time>').format(
        iso=utc.isoformat(), full=utc.strftime("%Y-%m-%d %H:%M:%S UTC"),
        clock=utc.strftime("%H:%M:%S"))
    if now is None:
        return shown
    return shown + Markup(' <span class="ago">({})</span>').format(relative(utc, now))


def prose(text: object, now: datetime | None = None) -> Markup:
    """`text`, escaped, with each raw time in it shown as `time_html` shows one."""
    words = str(text or "")
    out = Markup()
    last = 0
    for match in ISO_TIME.finditer(words):
        at = parse_time(match.group())
        if at is None:
            continue
        out += escape(words[last:match.start()]) + time_html(at, now)
        last = match.end()
    return out + escape(words[last:])

"""Processes on this host: liveness that survives pid reuse, group signals, exit files."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), or None elsewhere.

    Recorded with the pid: after an executor restart a pid alone may name another process.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; fields follow the last ')'.
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else None


def alive(pid: int, started: str | None) -> bool:
    """True while `pid` is the very process recorded (not a zombie, not a reused pid)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: fall back to a signal-0 probe
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    fields = stat[stat.rfind(")") + 2:].split()
    if not fields or fields[0] in ("Z", "X"):
        return False
    return started is None or (len(fields) > 19 and fields[19] == started)


def signal_group(pid: int, sig: signal.Signals) -> bool:
    """Signal the process group led by `pid` (each worker runs in a session of its own)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    return True


def read_exit(path: Path) -> tuple[int | None, str] | None:
    """The launcher's record of the job's exit, or None when it wrote none (it was killed)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    code = doc.get("code")
    return (int(code) if code is not None else None, str(doc.get("detail", "")))

"""Crash points for tests that prove crash safety against real processes.

`ROTA_FAULTS=after_commit:submission` makes the named service exit hard (no cleanup, no ack)
the first time it passes that point. Unset in production; checking it costs one dict lookup.
"""

from __future__ import annotations

import os
import sys


def _armed() -> set[str]:
    return {p.strip() for p in os.environ.get("ROTA_FAULTS", "").split(",") if p.strip()}


_ARMED = _armed()


def crash_point(name: str) -> None:
    if name in _ARMED:
        sys.stderr.write(f"rota: fault injected at {name}; exiting hard\n")
        sys.stderr.flush()
        os._exit(86)

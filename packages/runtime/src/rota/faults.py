"""Crash points for tests that prove crash safety against real processes.

`ROTA_FAULTS=after_commit:submission` makes the named service exit hard (no cleanup, no ack)
the first time it passes that point; `ROTA_FAULTS=fail:handler:<durable>` makes that
consumer's handler raise on every message (the dead letter's test). Unset in production;
checking it costs one dict lookup.
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


class InjectedFault(RuntimeError):
    """Raised at an armed `fail:<name>` point: a handler that fails on every delivery."""


def fail_point(name: str) -> None:
    if f"fail:{name}" in _ARMED:
        raise InjectedFault(f"fault injected at {name}")

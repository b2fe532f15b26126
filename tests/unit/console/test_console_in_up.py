"""`rota up` says where the console is, and picks a port no other stack holds."""

from __future__ import annotations

import contextlib
import socket

import pytest
from rota.cli import stack
from rota.cli.up import print_summary


def test_rota_up_prints_the_console_url(capsys: pytest.CaptureFixture[str]) -> None:
    print_summary({"nats_url": "nats://x", "nats": "embedded", "nats_auth": "on",
                   "database_url": "postgresql://x", "database": "embedded", "executor": "sim",
                   "services": {}, "console": {"url": "http://127.0.0.1:8089", "state": "ready"}})
    assert "Console   http://127.0.0.1:8089 (ready" in capsys.readouterr().err


def test_the_console_port_is_the_set_one_else_8089_else_a_free_one() -> None:
    assert stack.console_port({"ROTA_CONSOLE_PORT": "18000"}) == 18000
    with socket.socket() as held:
        with contextlib.suppress(OSError):  # someone else holds 8089 already: the same case
            held.bind(("127.0.0.1", stack.CONSOLE_PORT))
        held.listen()
        port = stack.console_port({})
        assert port != stack.CONSOLE_PORT
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))


def _matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: `*` one token, `>` the rest."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or token not in ("*", have[i]):
            return False
    return len(want) == len(have)


@pytest.mark.parametrize(("subject", "allowed"), [
    ("rota.api.job.trace", True), ("rota.api.job.trace.nlp", True),
    ("rota.api.queues.summary.vision", True), ("rota.api.cancel.nlp", True),
    ("rota.sys.ledger.allocations", True), ("rota.sys.preemption.plans", True),
    ("rota.api.submit.nlp", False), ("rota.api.submit", False), ("rota.cmd.cancel.nlp", False),
    ("rota.evt.job.cancelled", False), ("$JS.API.STREAM.INFO.ROTA_EVT", False),
    ("rota.sys.deadletter.ledger", False),
])
def test_the_consoles_identity_may_read_and_cancel_but_never_submit(subject: str,
                                                                    allowed: bool) -> None:
    from rota.auth.permissions import console_permissions

    assert any(_matches(p, subject) for p in console_permissions().publish) is allowed


def test_rota_up_says_how_to_log_in_to_the_console(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    from rota.cli.running import console_login

    admin = Path("/tmp/rota-home/auth/creds/admin.creds")
    print_summary({"nats_url": "nats://x", "nats": "embedded", "nats_auth": "on",
                   "database_url": "postgresql://x", "database": "embedded", "executor": "sim",
                   "services": {}, "console": {"url": "http://127.0.0.1:8089", "state": "ready",
                                               "login": console_login(admin)}})
    said = capsys.readouterr().err
    login = next(line for line in said.splitlines() if line.startswith("Log in"))
    assert str(admin) in login and "rota creds issue --team" in login
    assert "rota creds issue --team" in console_login(None)

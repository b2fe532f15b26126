"""`rota up` says where the console is, and picks a port no other stack holds."""

from __future__ import annotations

import contextlib
import socket

import pytest
from rota.cli import stack
from rota.cli.up import _print_summary


def test_rota_up_prints_the_console_url(capsys: pytest.CaptureFixture[str]) -> None:
    _print_summary({"nats_url": "nats://x", "nats": "embedded", "nats_auth": "on",
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

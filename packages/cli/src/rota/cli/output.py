"""How every command speaks: rich tables for people, `--json` for programs, and exit codes.

Exit codes: 0 success; 2 invalid input (the message names the field); 1 anything else, with a
one-line cause. No command ever ends in a bare traceback.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any, NoReturn, ParamSpec, TypeVar

import typer
from rich.console import Console

from rota.cli.untrusted import untrusted

console = Console()
err_console = Console(stderr=True)

P = ParamSpec("P")
R = TypeVar("R")

EXIT_FAILURE = 1
EXIT_INVALID = 2


class InvalidInput(Exception):
    def __init__(self, message: str, field: str | None = None, code: str = "INVALID") -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.code = code
        self.message = message


class CommandFailed(Exception):
    pass


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def emit_json(value: Any, *, compact: bool = False) -> None:
    text = json.dumps(value, default=_default, indent=None if compact else 2)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def fail(message: str, *, code: int, json_out: bool, field: str | None = None,
         error_code: str | None = None) -> NoReturn:
    if json_out:
        emit_json({"ok": False, "error": {"code": error_code or ("INVALID" if code == 2 else
                                                                 "FAILED"),
                                          "field": field, "message": message}})
    else:
        err_console.print(f"[red]error:[/red] {untrusted(message, multiline=True)}",
                          highlight=False)
    raise typer.Exit(code)


def handled(func: Callable[P, R]) -> Callable[P, R]:
    """Turn every failure into a clear message and the right exit code."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        json_out = bool(kwargs.get("json_out", False))
        try:
            return func(*args, **kwargs)
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except InvalidInput as exc:
            fail(str(exc), code=EXIT_INVALID, json_out=json_out, field=exc.field,
                 error_code=exc.code)
        except CommandFailed as exc:
            fail(str(exc), code=EXIT_FAILURE, json_out=json_out)
        except Exception as exc:
            fail_for(exc, json_out=json_out)

    return wrapper


def fail_for(exc: Exception, *, json_out: bool) -> NoReturn:
    """The failures of the layers below: their modules load here, once something failed,
    not at every start (a command that never reads the config does not import it)."""
    from pydantic import ValidationError

    from rota.config import ConfigError
    from rota.contracts import ContractError
    from rota.contracts.envelope import first_error
    from rota.endpoints import NotRunningError

    if isinstance(exc, ContractError):
        fail(str(exc), code=EXIT_INVALID, json_out=json_out, field=exc.field, error_code=exc.code)
    if isinstance(exc, ValidationError):
        err = first_error(exc)
        fail(str(err), code=EXIT_INVALID, json_out=json_out, field=err.field)
    if isinstance(exc, ConfigError):
        fail(str(exc), code=EXIT_INVALID, json_out=json_out, error_code="INVALID_CONFIG")
    if isinstance(exc, NotRunningError):
        fail(str(exc), code=EXIT_FAILURE, json_out=json_out)
    cause = f"{type(exc).__name__}: {exc}".splitlines()[0]
    fail(cause, code=EXIT_FAILURE, json_out=json_out)

"""`rota auth init` and `rota creds issue`: Rota's NATS identities, made from the keys under
`ROTA_HOME/auth` (or `--auth-dir`). Only whoever can read the account seed there can issue
credentials: that is what "admin only" means on this machine."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated

import typer

from rota.auth.keys import ROTATION_GRACE_S, AuthDir, TeamLimits
from rota.cli.output import CommandFailed, InvalidInput, console, emit_json, handled
from rota.cli.untrusted import untrusted
from rota.config import load_config
from rota.settings import get_settings

creds_app = typer.Typer(help="NATS credentials for teams and people.", no_args_is_help=True)
auth_app = typer.Typer(help="Rota's NATS identities and the server config.",
                       no_args_is_help=True)

AuthDirOption = Annotated[Path | None, typer.Option(
    "--auth-dir", help="Where the keys live; ROTA_HOME/auth if omitted.")]


def _auth_dir(path: Path | None) -> AuthDir:
    return AuthDir(path or get_settings().home / "auth")


@auth_app.command("init")
@handled
def auth_init(
    auth_dir: AuthDirOption = None,
    rotate: Annotated[bool, typer.Option(
        "--rotate", help="New credentials for every service and the console; the old keys "
        "are revoked in server.conf (the server refuses them once restarted) and retired in "
        "the roster after --grace. Restart NATS and the services after.")]
    = False,
    grace: Annotated[float, typer.Option(
        "--grace", help="Seconds after the rotation until the roster stops believing what "
        "the old keys signed; restart the services within it.", min=0)]
    = ROTATION_GRACE_S,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Make (or refresh) the operator, account and service identities, and server.conf for
    a nats-server of your own (`include` it, or pass it with `-c`). Existing keys are kept."""
    auth = _auth_dir(auth_dir).ensure()
    if rotate:
        auth.rotate_services(grace_s=grace)
    summary = {"ok": True, "server_conf": str(auth.server_conf),
               "creds": str(auth.creds_path("admin").parent),
               "run_signing_key": str(auth.run_signing_key),
               "account": auth.account_public_file.read_text().strip(), "rotated": rotate}
    if json_out:
        emit_json(summary)
    else:
        console.print(f"server config  {summary['server_conf']}\n"
                      f"credentials    {summary['creds']}/<service>.creds, admin.creds\n"
                      f"account        {summary['account']}", highlight=False)


@creds_app.command("issue")
@handled
def creds_issue(
    team: Annotated[str, typer.Option(help="The team the credentials speak for.")],
    user: Annotated[str | None, typer.Option(help="A person in the team, named in the JWT.")]
    = None,
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="The .creds file to write; ./<team>[-<user>].creds if omitted.")]
    = None,
    expires_in: Annotated[float | None, typer.Option(
        "--expires-in", help="Seconds until the credentials expire; never if omitted.")] = None,
    config: Annotated[Path | None, typer.Option(
        "--config", "-c", help="rota.yaml whose teams are checked; the example if omitted.")]
    = None,
    max_payload: Annotated[int | None, typer.Option(
        "--max-payload", help="Bytes of one message the server lets these credentials send; "
        "ROTA_MAX_MESSAGE_BYTES + 4096 (for headers) if omitted.", min=1)] = None,
    max_subs: Annotated[int, typer.Option(
        "--max-subs", help="Subscriptions the server lets a connection hold.", min=1)] = 100,
    auth_dir: AuthDirOption = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Write a team's (or a team member's) credentials: its own commands and requests, its
    own replies, nothing else. Hand the file over; the holder sets ROTA_NATS_CREDS to it."""
    teams = load_config(config or get_settings().config).teams
    if team not in teams:
        raise InvalidInput(f"unknown team {team!r}; rota.yaml has {', '.join(sorted(teams))}",
                           "team", "UNKNOWN_TEAM")
    if expires_in is not None and expires_in <= 0:
        raise InvalidInput("must be > 0", "expires_in")
    auth = _auth_dir(auth_dir)
    if not (auth.root / "account.nk").exists():
        raise CommandFailed(f"no account key under {auth.root}: run `rota auth init` (or "
                            "`rota up`) first, as the platform admin")
    path = out or Path(f"{team}-{user}.creds" if user else f"{team}.creds")
    limits = TeamLimits.for_messages(get_settings().max_message_bytes)
    limits = replace(limits, payload=max_payload or limits.payload, subs=max_subs)
    auth.issue_team(team, user, path, expires_in_s=expires_in, limits=limits)
    if json_out:
        emit_json({"ok": True, "team": team, "user": user, "creds": str(path),
                   "limits": asdict(limits)})
    else:
        console.print(untrusted(f"wrote {path} for team {team}" + (f", user {user}" if user else "")
                                + "; use it with ROTA_NATS_CREDS"), highlight=False)

"""The `rota` command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rota.cli.entry import APP_SETTINGS, COMMANDS, GROUPS, add, main
from rota.cli.output import console, emit_json, handled
from rota.cli.untrusted import untrusted

app = typer.Typer(**APP_SETTINGS)
for name in (*GROUPS, *COMMANDS):
    add(app, name)
config_app = typer.Typer(help="Check rota.yaml files.", no_args_is_help=True)
app.add_typer(config_app, name="config")


@config_app.command("check")
@handled
def config_check(
    file: Annotated[Path, typer.Argument(help="The rota.yaml to check.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Validate a config file; errors name the key path and the rule (exit 2)."""
    from rota.config import load_config

    config = load_config(file)
    capacity = config.capacity()
    summary = {"ok": True, "file": str(file), "nodes": len(config.expanded_nodes()),
               "capacity": capacity, "teams": sorted(config.teams),
               "queues": [q.value for q in config.queues]}
    if json_out:
        emit_json(summary)
    else:
        gpus = ", ".join(f"{n} {f}" for f, n in capacity.items())
        console.print(untrusted(f"{file}: ok — {summary['nodes']} nodes ({gpus}),"
                                f" {len(config.teams)} teams, {len(config.queues)} queues"),
                      highlight=False)


@app.command()
@handled
def migrate(
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Apply every service's database migrations (ROTA_DATABASE_URL, or the running `rota up`),
    and make or update the NATS streams and lease buckets (ROTA_NATS_URL): as the admin
    (ROTA_NATS_CREDS), since the services' identities may not manage streams."""
    import asyncio

    from rota.cli.stack import SERVICES, migrate_all, prepare_streams
    from rota.endpoints import resolve
    from rota.settings import get_settings

    settings = get_settings()
    endpoints = resolve(settings)
    done = migrate_all(endpoints.database_url, SERVICES)
    streams = asyncio.run(prepare_streams(settings, endpoints))
    if json_out:
        emit_json({"ok": True, "migrated": done, "streams": streams})
    else:
        console.print(f"migrated: {', '.join(done)}\nstreams: {', '.join(streams)}")


contracts_app = typer.Typer(help="The generated AsyncAPI and JSON Schema documents.",
                            no_args_is_help=True)
app.add_typer(contracts_app, name="contracts")


@contracts_app.command("generate")
@handled
def contracts_generate(
    out: Annotated[Path, typer.Option(help="Where the documents live.")] = Path("contracts"),
    check: Annotated[bool, typer.Option(
        "--check", help="Write nothing; exit 1 if the files differ from the code, or if a "
        "change breaks the last release (contracts/released) without a version bump.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Regenerate contracts/asyncapi.yaml and contracts/schemas/*.json from the models."""
    from rota.contractgen import spec

    if check:
        stale = spec.differences(out)
        unversioned = spec.release_problems(out)
        if json_out:
            emit_json({"ok": not stale and not unversioned, "stale": stale,
                       "unversioned": unversioned})
        else:
            lines = [*stale, *(f"incompatible without a version bump: {p}" for p in unversioned)]
            console.print("\n".join(lines) if lines else f"{out}: up to date", highlight=False)
        if stale or unversioned:
            raise typer.Exit(1)
        return
    written = spec.write(out)
    if json_out:
        emit_json({"ok": True, "written": [str(p) for p in written]})
    else:
        console.print(f"wrote {len(written)} files under {out}")


@contracts_app.command("release")
@handled
def contracts_release(
    out: Annotated[Path, typer.Option(help="Where the documents live.")] = Path("contracts"),
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Keep the code's contracts as contracts/released/v<protocol version>, the release that
    `generate --check` compares with. Refused while a change breaks the last release without
    its version bump (raise it in rota.contracts.versions and write contracts/CHANGELOG.md)."""
    from rota.contractgen import spec
    from rota.contracts import release

    unversioned = spec.release_problems(out)
    if unversioned:
        raise typer.BadParameter("incompatible without a version bump:\n" + "\n".join(unversioned))
    target = release.write_release(out, spec.current_release())
    if json_out:
        emit_json({"ok": True, "release": str(target)})
    else:
        console.print(f"released {target}")


if __name__ == "__main__":
    main()

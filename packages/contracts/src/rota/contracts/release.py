"""Releases of the contracts: what the code promises now, the snapshots kept under
`contracts/released/v<N>/`, and the check that no change breaks a client without its version
going up (rota.contracts.compat; contracts/CHANGELOG.md, "Version policy").
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from rota.contracts.compat import Direction, Release, version_problems
from rota.contracts.envelope import COMMAND_TYPES, MESSAGE_TYPES, QUERY_TYPES
from rota.contracts.versions import PROTOCOL_VERSION, message_version

THIRD_PARTY = ("team", "run")
"""The identities a client outside Rota holds; the services' and the console's are Rota's
own and change with it."""


def direction(type_name: str) -> Direction:
    """Who writes `type_name`: a client (input) or Rota (output). `StartRun` and `StopRun`
    are Rota's own commands to an executor, which reads them as it reads an event."""
    written_by_clients = ({*COMMAND_TYPES, *QUERY_TYPES, "ReportCheckpoint"}
                          - {"ApiReply", "StartRun", "StopRun"})
    return "input" if type_name in written_by_clients else "output"


def current(schemas: dict[str, str], asyncapi: dict[str, Any],
            permissions: dict[str, Any]) -> Release:
    """The release the code would make: the generated schemas (less `JobSpec.json`, which is
    `SubmitJob`'s), the versions, the third-party identities and the channels' addresses."""
    identities = {name: {key: permissions[name][key]
                         for key in ("publish", "subscribe", "inbox_prefix")}
                  for name in THIRD_PARTY}
    channels = sorted({str(c["address"]) for c in asyncapi["channels"].values()
                       if c.get("address")})
    return Release(
        protocol_version=PROTOCOL_VERSION,
        message_versions={name: message_version(name) for name in sorted(MESSAGE_TYPES)},
        directions={name: direction(name) for name in sorted(MESSAGE_TYPES)},
        identities=identities, channels=channels,
        schemas={name.removesuffix(".json"): json.loads(text)
                 for name, text in schemas.items() if name != "JobSpec.json"})


def released(root: Path) -> list[tuple[int, Path]]:
    """The releases kept under `root/released`, oldest first."""
    found = []
    for path in (root / "released").glob("v*"):
        if path.is_dir() and path.name[1:].isdigit():
            found.append((int(path.name[1:]), path))
    return sorted(found)


def problems(root: Path, now: Release) -> list[str]:
    """Every incompatible change without its bump: between consecutive releases, and from
    the last release to the code. Empty when there is no release yet."""
    history = [(number, Release.read(path)) for number, path in released(root)]
    found = []
    for (before, old), (after, new) in itertools.pairwise(history):
        found += [f"v{before} -> v{after}: {p}" for p in version_problems(old, new)]
    if history:
        number, last = history[-1]
        if now.protocol_version < last.protocol_version:
            found.append(f"the code's protocol version {now.protocol_version} is older than "
                         f"release v{number}")
        found += [f"v{number} -> code: {p}" for p in version_problems(last, now)]
    return found


def snapshot(now: Release) -> dict[str, str]:
    """The files of a release directory, by relative path."""
    files = {"protocol.json": json.dumps(now.protocol_document(), indent=2, sort_keys=True)
             + "\n"}
    files.update({f"schemas/{name}.json": json.dumps(schema, indent=2, sort_keys=True) + "\n"
                  for name, schema in sorted(now.schemas.items())})
    return files


def write_release(root: Path, now: Release) -> Path:
    """Keep the code's contracts as release v<protocol version> (made again when it exists:
    within a version only additive changes land, and `problems` has checked them)."""
    target = root / "released" / f"v{now.protocol_version}"
    for stale in (target / "schemas").glob("*.json"):
        stale.unlink()
    for relative, text in snapshot(now).items():
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        (target / relative).write_text(text)
    return target

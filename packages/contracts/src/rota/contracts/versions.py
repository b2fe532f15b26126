"""The contracts' two versions (contracts/CHANGELOG.md, "Version policy").

- A **message version** per type, in every envelope's `version`: it goes up when that type's
  schema changes incompatibly (a field removed, made required or optional, retyped, an enum
  value removed, a constraint changed). A reader refuses an envelope newer than it knows.
- The **protocol version**: the subjects, the identities' permissions and the job protocol
  as a whole. It goes up when a message version does, and when a client that followed the
  previous release would be refused something it was allowed (a subject, a permission, an
  inbox prefix), or a channel goes away.

Additive changes bump neither: a new message type or subject, a new optional field, a new
enum value (readers must accept values they do not know), a permission added.
`tests/unit/test_contract_versions.py` compares the code with the last release kept under
`contracts/released/v<N>/` and fails on an incompatible change without the bump.
"""

from __future__ import annotations

PROTOCOL_VERSION = 2
"""2 since the trust boundary: see contracts/CHANGELOG.md for what version 1 allowed."""

MESSAGE_VERSIONS: dict[str, int] = {
    # Version 2: `run_token` is gone (the token goes onto no stream), and only the executor
    # publishes it (a job reports by request, `ReportCheckpoint`).
    "RunCheckpointed": 2,
    # Version 2: `run_token` is gone; the executor mints the run's token itself.
    "StartRun": 2,
}
"""Every type whose version is above 1; any other type is at 1."""

MAX_MESSAGE_VERSION = max((1, *MESSAGE_VERSIONS.values()))


def message_version(type_name: str) -> int:
    """The version of `type_name` that this code writes, and the newest it reads."""
    return MESSAGE_VERSIONS.get(type_name, 1)

"""Building blocks shared by every message: strict bases, bounded strings, tiers."""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    WithJsonSchema,
)


class StrictModel(BaseModel):
    """Rejects unknown fields: a typo in a command must fail loudly, not be dropped."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False,
                              defer_build=True)


class OpenModel(BaseModel):
    """For events: later minor versions may add fields, and old readers must accept them."""

    model_config = ConfigDict(extra="ignore", frozen=True, defer_build=True)


class Tier(StrEnum):
    production = "production"
    training = "training"
    experiment = "experiment"

    @property
    def rank(self) -> int:
        """0 is the highest priority."""
        return _RANK[self]


TIER_ORDER: tuple[Tier, ...] = (Tier.production, Tier.training, Tier.experiment)
# A dict, not TIER_ORDER.index: schedulers ask for ranks millions of times per replay.
_RANK: dict[Tier, int] = {t: i for i, t in enumerate(TIER_ORDER)}

Name = Annotated[
    str,
    StringConstraints(min_length=1, max_length=63, pattern=r"^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$"),
]
"""A DNS-label-like name: teams, users, flavors, jobs, nodes."""

TEAM_NAME_PATTERN = r"^[a-z0-9]([a-z0-9_-]*[a-z0-9])?$"
"""A team's name is one NATS subject token (no `.`, `*`, `>` or whitespace): the services
read the team from the subject a team's credentials let it publish on, `rota.cmd.submit.nlp`,
so a name with a dot (`ml.nlp`) would end in another team's token."""
TEAM_NAME_RULE = ("a team's name is one subject token: 1-63 lowercase letters, digits, '-' and"
                  " '_', starting and ending with a letter or digit (no '.')")
_TEAM_NAME = re.compile(TEAM_NAME_PATTERN)


def is_team_name(text: str) -> bool:
    return len(text) <= 63 and _TEAM_NAME.match(text) is not None


def _team_name(value: str) -> str:
    if not is_team_name(value):
        raise ValueError(f"{value!r}: {TEAM_NAME_RULE}")
    return value


TeamName = Annotated[str, AfterValidator(_team_name)]
"""A team's name where one is declared (`rota.yaml`'s `teams`)."""

JobName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$"),
]
SubmissionId = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")
]
Uuid = Annotated[
    str,
    StringConstraints(
        pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
    ),
]
ShortText = Annotated[str, StringConstraints(max_length=1024)]
Uri = Annotated[str, StringConstraints(min_length=1, max_length=2048)]
LabelKey = Annotated[
    str, StringConstraints(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
]
LabelValue = Annotated[str, StringConstraints(max_length=256)]
EnvName = Annotated[
    str, StringConstraints(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
]
EnvValue = Annotated[str, StringConstraints(max_length=4096)]
Arg = Annotated[str, StringConstraints(max_length=4096)]
GpuCount = Annotated[int, Strict(), Field(ge=0, le=1_000_000)]

RFC3339_PATTERN = r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
_RFC3339 = re.compile(RFC3339_PATTERN)


def _rfc3339(value: Any) -> Any:
    """What the schema's `format: date-time` allows, and nothing pydantic would add to it
    (a Unix timestamp, a bare date, a time without its offset)."""
    if isinstance(value, datetime):  # built in Python, not read from a message
        return value
    if not isinstance(value, str) or _RFC3339.match(value) is None:
        raise ValueError("must be an RFC 3339 date-time string with an offset,"
                         " e.g. 2026-12-01T10:00:00Z")
    return value


Timestamp = Annotated[
    datetime, BeforeValidator(_rfc3339),
    # The pattern too: a validator that skips `format` (most do, by default) still agrees.
    WithJsonSchema({"type": "string", "format": "date-time", "pattern": RFC3339_PATTERN}),
]
"""A time in a message: an RFC 3339 string with its offset, as the schemas say."""

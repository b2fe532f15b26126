"""Is a contract change compatible? The JSON Schemas and the protocol of the code, against a
release kept under `contracts/released/v<N>/` (contracts/CHANGELOG.md, "Version policy").

A schema change is judged by who writes the message:
- **input** (commands, requests, a run's report: a client writes, Rota reads): the new schema
  must accept every message the old one did. Loosening is fine; a new required field, a
  removed field (commands are strict: it would be refused), a narrower type or a tighter
  bound breaks.
- **output** (events, notices, replies: Rota writes, a client reads): every new message must
  satisfy a reader of the old schema. Tightening is fine; a required field removed or made
  optional, a wider type or a looser bound breaks.

Additive by policy in both directions: a new optional field (events are read leniently) and a
new enum value (a reader must accept values it does not know, e.g. a new wait reason).
Titles, descriptions, defaults and examples never matter; nor does a pattern that restates
`format: date-time` (RFC 3339 with its offset), which a schema said already.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Direction = Literal["input", "output"]

_IGNORED = frozenset({"title", "description", "default", "examples", "$defs", "deprecated"})
_UPPER = ("maxLength", "maximum", "exclusiveMaximum", "maxItems", "maxProperties")
_LOWER = ("minLength", "minimum", "exclusiveMinimum", "minItems", "minProperties")
_EXACT = ("pattern", "format", "multipleOf", "uniqueItems")
_HANDLED = frozenset({"type", "enum", "const", "properties", "required", "items", "anyOf",
                      "oneOf", "allOf", "$ref", "additionalProperties", "prefixItems",
                      *_UPPER, *_LOWER, *_EXACT})


@dataclass(frozen=True)
class _Walk:
    old_root: dict[str, Any]
    new_root: dict[str, Any]
    direction: Direction

    def resolve(self, node: Any, root: dict[str, Any]) -> Any:
        seen = 0
        while isinstance(node, dict) and "$ref" in node and seen < 32:
            pointer = str(node["$ref"]).removeprefix("#/").split("/")
            target: Any = root
            for part in pointer:
                target = target[part.replace("~1", "/").replace("~0", "~")]
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
            seen += 1
        return node

    def compare(self, old: Any, new: Any, path: str, depth: int = 0) -> list[str]:
        if depth > 64:
            return []
        old, new = self.resolve(old, self.old_root), self.resolve(new, self.new_root)
        if not isinstance(old, dict) or not isinstance(new, dict):
            return [] if old == new else [f"{path}: schema changed from {old!r} to {new!r}"]
        breaks = self._types(old, new, path) + self._enum(old, new, path)
        breaks += self._bounds(old, new, path) + self._unions(old, new, path, depth)
        breaks += self._objects(old, new, path, depth)
        if "items" in old or "items" in new:
            breaks += self.compare(old.get("items", {}), new.get("items", {}), f"{path}[]",
                                   depth + 1)
        for index, (a, b) in enumerate(zip(old.get("prefixItems", []),
                                           new.get("prefixItems", []), strict=False)):
            breaks += self.compare(a, b, f"{path}[{index}]", depth + 1)
        for key in sorted((set(old) | set(new)) - _HANDLED - _IGNORED):
            if old.get(key) != new.get(key):
                breaks.append(f"{path}: {key} changed from {old.get(key)!r} to "
                              f"{new.get(key)!r}")
        return breaks

    def _looser_breaks(self) -> bool:
        return self.direction == "output"

    def _types(self, old: dict[str, Any], new: dict[str, Any], path: str) -> list[str]:
        if "type" not in old and "type" not in new:
            return []
        before, after = _types(old.get("type")), _types(new.get("type"))
        if before == after:
            return []
        wider = _covers(after, before)
        narrower = _covers(before, after)
        if (wider and not self._looser_breaks()) or (narrower and self._looser_breaks()):
            return []
        return [f"{path}: type {sorted(before) or 'any'} became {sorted(after) or 'any'}"]

    def _enum(self, old: dict[str, Any], new: dict[str, Any], path: str) -> list[str]:
        breaks = []
        if ("const" in old or "const" in new) and old.get("const") != new.get("const"):
            breaks.append(f"{path}: const {old.get('const')!r} became {new.get('const')!r}")
        if "enum" in old and "enum" in new:
            removed = [v for v in old["enum"] if v not in new["enum"]]
            if removed and self.direction == "input":
                breaks.append(f"{path}: enum values {removed} removed")
        elif "enum" in new and self.direction == "input":
            breaks.append(f"{path}: now restricted to {new['enum']}")
        elif "enum" in old and self.direction == "output":
            breaks.append(f"{path}: no longer restricted to {old['enum']}")
        return breaks

    def _bounds(self, old: dict[str, Any], new: dict[str, Any], path: str) -> list[str]:
        breaks = []
        for key in (*_UPPER, *_LOWER, *_EXACT):
            a, b = old.get(key), new.get(key)
            if a == b or (key == "pattern" and a is None and _restates_date_time(old, new)):
                continue
            if key in _EXACT:
                looser, tighter = b is None, a is None
            elif key in _UPPER:
                looser = b is None or (a is not None and b > a)
                tighter = not looser
            else:
                looser = b is None or (a is not None and b < a)
                tighter = not looser
            if (looser and self._looser_breaks()) or (tighter and not self._looser_breaks()) \
                    or (key in _EXACT and a is not None and b is not None):
                breaks.append(f"{path}: {key} {a!r} became {b!r}")
        return breaks

    def _unions(self, old: dict[str, Any], new: dict[str, Any], path: str,
                depth: int) -> list[str]:
        breaks = []
        for key in ("anyOf", "oneOf", "allOf"):
            a, b = old.get(key), new.get(key)
            if a is None and b is None:
                continue
            if a is None or b is None:
                breaks.append(f"{path}: {key} {'added' if a is None else 'removed'}")
                continue
            for index, (x, y) in enumerate(zip(a, b, strict=False)):
                breaks += self.compare(x, y, f"{path}<{key} {index}>", depth + 1)
            more = len(b) > len(a)
            if len(a) != len(b) and (key == "allOf" or more == self._looser_breaks()):
                breaks.append(f"{path}: {key} has {len(b)} branches, was {len(a)}")
        return breaks

    def _objects(self, old: dict[str, Any], new: dict[str, Any], path: str,
                 depth: int) -> list[str]:
        breaks = []
        before, after = old.get("properties", {}), new.get("properties", {})
        was, now = set(old.get("required", ())), set(new.get("required", ()))
        for name in sorted(set(before) | set(after)):
            where = f"{path}.{name}" if path else name
            if name not in after:
                if self.direction == "input" or name in was:
                    breaks.append(f"{where}: removed")
            elif name not in before:
                if name in now and self.direction == "input":
                    breaks.append(f"{where}: new required field")
            else:
                breaks += self.compare(before[name], after[name], where, depth + 1)
                if name in was and name not in now and self.direction == "output":
                    breaks.append(f"{where}: no longer required")
                if name in now and name not in was and self.direction == "input":
                    breaks.append(f"{where}: now required")
        if self.direction == "input":
            if new.get("additionalProperties", True) is False and \
                    old.get("additionalProperties", True) is not False:
                breaks.append(f"{path or 'message'}: unknown fields now refused")
            if isinstance(old.get("additionalProperties"), dict) and \
                    isinstance(new.get("additionalProperties"), dict):
                breaks += self.compare(old["additionalProperties"], new["additionalProperties"],
                                       f"{path}{{*}}", depth + 1)
        return breaks


_RFC3339 = r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"


def _restates_date_time(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """A pattern that says what `format: date-time` (RFC 3339, with its offset) already
    did, for validators that do not check formats: no message the schema allowed is lost."""
    return old.get("format") == new.get("format") == "date-time" and new["pattern"] == _RFC3339


def _types(value: Any) -> set[str]:
    if value is None:
        return set()
    return {value} if isinstance(value, str) else set(value)


def _covers(wide: set[str], narrow: set[str]) -> bool:
    """Every JSON value of a type in `narrow` is of a type in `wide` (no type: any value)."""
    if not wide:
        return True
    if not narrow:
        return False
    return all(t in wide or (t == "integer" and "number" in wide) for t in narrow)


def schema_breaks(old: dict[str, Any], new: dict[str, Any], direction: Direction) -> list[str]:
    """How `new` breaks a party that followed `old` (empty: compatible)."""
    walk = _Walk(old, new, direction)
    return walk.compare({k: v for k, v in old.items() if k != "$defs"},
                        {k: v for k, v in new.items() if k != "$defs"}, "")


def envelope_breaks(old: dict[str, Any], new: dict[str, Any],
                    direction: Direction) -> list[str]:
    """`schema_breaks` of two envelope schemas, less their `version`, which is what moves."""

    def without_version(schema: dict[str, Any]) -> dict[str, Any]:
        properties = {k: v for k, v in schema.get("properties", {}).items() if k != "version"}
        return {**schema, "properties": properties}

    return schema_breaks(without_version(old), without_version(new), direction)


def subject_covers(wide: str, narrow: str) -> bool:
    """True when every subject matching the NATS pattern `narrow` matches `wide`."""
    a, b = wide.split("."), narrow.split(".")
    for index, token in enumerate(a):
        if token == ">":
            return len(b) > index
        if index >= len(b) or b[index] == ">":
            return False
        if token != "*" and token != b[index]:
            return False
    return len(a) == len(b)


def permission_breaks(identity: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What `identity` was allowed in `old` that `new` refuses."""
    breaks = []
    for kind in ("publish", "subscribe"):
        for subject in old.get(kind, ()):
            if not any(subject_covers(allowed, subject) for allowed in new.get(kind, ())):
                breaks.append(f"{identity}: may no longer {kind} {subject!r}")
    if old.get("inbox_prefix") != new.get("inbox_prefix"):
        breaks.append(f"{identity}: inbox prefix {old.get('inbox_prefix')!r} became "
                      f"{new.get('inbox_prefix')!r}")
    return breaks


@dataclass(frozen=True)
class Release:
    """What a release promised: its schemas, versions, third-party identities and channels."""

    protocol_version: int
    message_versions: dict[str, int]
    directions: dict[str, Direction]
    identities: dict[str, dict[str, Any]]
    channels: list[str]
    schemas: dict[str, dict[str, Any]]

    @classmethod
    def read(cls, root: Path) -> Release:
        protocol = json.loads((root / "protocol.json").read_text())
        schemas = {path.stem: json.loads(path.read_text())
                   for path in sorted((root / "schemas").glob("*.json"))}
        return cls(protocol["protocol_version"], protocol["message_versions"],
                   protocol["directions"], protocol["identities"], protocol["channels"],
                   schemas)

    def protocol_document(self) -> dict[str, Any]:
        return {"protocol_version": self.protocol_version,
                "message_versions": self.message_versions, "directions": self.directions,
                "identities": self.identities, "channels": self.channels}


def version_problems(old: Release, new: Release) -> list[str]:
    """Each incompatible change from `old` to `new` that its version does not account for:
    a message whose schema breaks without a higher message version, and a protocol break
    (any such message, a permission or channel taken away) without a higher protocol
    version. Empty when `new` may follow `old` as it is."""
    problems: list[str] = []
    protocol_breaks: list[str] = []
    for name, schema in sorted(old.schemas.items()):
        if name not in new.schemas:
            protocol_breaks.append(f"{name}: the message type is gone")
            continue
        direction = new.directions.get(name, old.directions.get(name, "output"))
        breaks = envelope_breaks(schema, new.schemas[name], direction)
        if not breaks:
            continue
        before, after = old.message_versions.get(name, 1), new.message_versions.get(name, 1)
        if after <= before:
            problems += [f"{name} (version {after}, not bumped): {b}" for b in breaks]
        protocol_breaks.append(f"{name}: version {before} -> {after}")
    for identity, permissions in sorted(old.identities.items()):
        protocol_breaks += permission_breaks(identity, permissions,
                                             new.identities.get(identity, {}))
    protocol_breaks += [f"channel {c!r} is gone" for c in old.channels if c not in new.channels]
    if protocol_breaks and new.protocol_version <= old.protocol_version:
        problems += [f"protocol (version {new.protocol_version}, not bumped): {b}"
                     for b in protocol_breaks]
    return problems

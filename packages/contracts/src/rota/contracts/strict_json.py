"""The JSON reader in front of every contract: what Python's `json` accepts but no consumer
(or PostgreSQL) can hold is refused here, with the field it was found in.

Refused, each as a `ContractError`: integer literals outside 64 bits (Python's own limit of
4,300 digits would raise a bare ValueError, and PostgreSQL's `bigint` ends at 2^63), the
non-standard `NaN`/`Infinity` and float literals that overflow to infinity, nesting deeper
than `MAX_DEPTH`, strings (values or keys) holding U+0000 or a lone surrogate, which
PostgreSQL text cannot store and UTF-8 cannot encode, and an object with the same key twice,
which Python would read as its last value and another reader as its first. A message that fails here can never
become valid, so consumers reject it on first delivery instead of retrying it forever.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 32
"""Objects and arrays nested deeper than this are refused (the envelope itself is level 1)."""

MAX_INT_DIGITS = 20
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# Cheap byte-level triggers for the walk: a string can hold U+0000 or a surrogate only
# through an escape (raw control bytes are already invalid JSON).
_SUSPECT_ESCAPE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])")


class JsonProblem(ValueError):
    """What `loads` refuses. `code` is a contract error code; `path` names the place."""

    def __init__(self, code: str, path: str | None, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.path = path
        self.message = message


class _Bad:
    """Stands in for a refused literal until the walk finds where it sits."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


class _Literals:
    """The number hooks of one `json.loads` call; `bad` says whether the walk must look."""

    __slots__ = ("bad",)

    def __init__(self) -> None:
        self.bad = False

    def integer(self, text: str) -> int | _Bad:
        digits = len(text) - (text[0] == "-")
        if digits <= MAX_INT_DIGITS:
            value = int(text)
            if INT64_MIN <= value <= INT64_MAX:
                return value
        self.bad = True
        return _Bad("integer out of range (a signed 64-bit integer is the most allowed)")

    def number(self, text: str) -> float | _Bad:
        value = float(text)
        if math.isfinite(value):
            return value
        self.bad = True
        return _Bad("number out of range (overflows to infinity)")

    def constant(self, text: str) -> _Bad:
        self.bad = True
        return _Bad(f"{text} is not a valid JSON number")

    def object(self, pairs: list[tuple[str, Any]]) -> dict[Any, Any]:
        doc: dict[Any, Any] = dict(pairs)
        if len(doc) != len(pairs):  # C-speed: only a repeated key makes them differ
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    break
                seen.add(key)
            self.bad = True
            doc[_DUPLICATE] = (key, _Bad("appears twice in one object; send each key once"))
        return doc


_DUPLICATE = object()
"""The key under which an object with a repeated key carries (that key, why): never a string,
so no message can hold it, and the walk always finds it before the document is used."""


def loads(raw: bytes) -> Any:
    """Parse `raw` as strict JSON. Raises `JsonProblem`, never anything else."""
    literals = _Literals()
    try:
        doc = json.loads(raw, parse_int=literals.integer, parse_float=literals.number,
                         parse_constant=literals.constant, object_pairs_hook=literals.object)
    except RecursionError:
        raise JsonProblem("MALFORMED_JSON", None,
                          f"nested deeper than {MAX_DEPTH} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise JsonProblem("MALFORMED_JSON", None, f"not valid JSON: {exc}") from None
    # Walking every message would cost each consumer a Python loop over every value; these
    # three tests are C-speed and say when the walk can find nothing.
    if (literals.bad or _SUSPECT_ESCAPE.search(raw) is not None
            or raw.count(b"{") + raw.count(b"[") > MAX_DEPTH):
        _walk(doc)
    return doc


def _walk(doc: Any) -> None:
    """Find the first refused value, depth first, without recursion."""
    stack: list[tuple[Any, tuple[str, ...]]] = [(doc, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            if len(path) >= MAX_DEPTH:
                raise _at("MALFORMED_JSON", path, f"nested deeper than {MAX_DEPTH} levels")
            if _DUPLICATE in node:
                twice, bad = node[_DUPLICATE]
                raise _at("INVALID_FIELD", (*path, twice), bad.why)
            for key, value in reversed(node.items()):
                if (why := _bad_string(key)) is not None:  # the key cannot name itself
                    raise _at("INVALID_FIELD", path, f"a key {why}")
                stack.append((value, (*path, key)))
        elif isinstance(node, list):
            if len(path) >= MAX_DEPTH:
                raise _at("MALFORMED_JSON", path, f"nested deeper than {MAX_DEPTH} levels")
            stack.extend((value, (*path, str(i))) for i, value in reversed(list(enumerate(node))))
        elif isinstance(node, _Bad):
            raise _at("INVALID_FIELD", path, node.why)
        elif isinstance(node, str) and (why := _bad_string(node)) is not None:
            raise _at("INVALID_FIELD", path, why)


def _bad_string(text: str) -> str | None:
    if "\x00" in text:
        return "must not contain U+0000 (NUL)"
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            return "must not contain a lone UTF-16 surrogate"
    return None


def _at(code: str, path: tuple[str, ...], message: str) -> JsonProblem:
    dotted = ".".join(path)
    if len(dotted) > 200:  # a path 32 levels deep says nothing more than its start
        dotted = dotted[:200] + "..."
    return JsonProblem(code, dotted or None, message)

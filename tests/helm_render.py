"""A renderer of the SUBSET of Helm's Go templates that `deploy/helm/rota` uses. It is not
helm: no helm binary can be installed on these machines, so the chart's test renders with
this, and says so. It supports only what the chart uses, and fails loudly on anything else:

- actions `{{ pipeline }}` with `{{-` / `-}}` whitespace trimming;
- `range $k, $v := pipeline` over a map (in key order, as Go does), `if` / `else`, `end`;
- values: `.Values.a.b`, `.Release.Name`, `.Release.Namespace`, `.Chart.*`, `$`, `$var.a`,
  "strings", numbers, `( pipeline )`;
- functions: quote, nindent, default, printf (%s only), eq, ne, gt, and, fail, base, trimSuffix,
  `.Files.Get`, `.Files.Glob`.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ACTION = re.compile(r"{{(-?)\s*(.*?)\s*(-?)}}", re.S)
TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|\(|\)|\||[^\s()|]+')


class TemplateError(Exception):
    pass


@dataclass
class Files:
    root: Path

    def get(self, path: str) -> str:
        return (self.root / path).read_text()

    def glob(self, pattern: str) -> dict[str, str]:
        found = sorted(Path(d, f).relative_to(self.root).as_posix()  # helm follows symlinks too
                       for d, _, names in os.walk(self.root, followlinks=True) for f in names)
        return {p: self.get(p) for p in found if fnmatch.fnmatch(p, pattern)}


@dataclass
class Scope:
    root: dict[str, Any]
    variables: dict[str, Any] = field(default_factory=dict)


def _lookup(value: Any, parts: list[str], where: str) -> Any:
    for part in parts:
        if isinstance(value, dict):
            value = value.get(part)
        else:
            raise TemplateError(f"{where}: cannot take .{part} of {value!r}")
    return value


def _tokens(text: str) -> list[str]:
    return TOKEN.findall(text)


def _quote(value: Any) -> str:
    return '"' + str("" if value is None else value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _nindent(n: int, value: Any) -> str:
    return "\n" + "\n".join((" " * n + line) if line else line for line in str(value).splitlines())


FUNCS: dict[str, Any] = {
    "quote": _quote,
    "nindent": _nindent,
    "default": lambda fallback, value=None: value if value not in (None, "", [], {}, False) else fallback,
    "printf": lambda fmt, *args: fmt.replace("%s", "{}").format(*args),
    "eq": lambda a, b: a == b,
    "ne": lambda a, b: a != b,
    "gt": lambda a, b: a > b,
    "and": lambda *args: next((a for a in args if not a), args[-1]),
    "fail": lambda message: (_ for _ in ()).throw(TemplateError(f"fail: {message}")),
    "base": posixpath.basename,
    "trimSuffix": lambda suffix, value: value[: -len(suffix)] if value.endswith(suffix) else value,
}


class Renderer:
    def __init__(self, chart: Path, values: dict[str, Any], release: str, namespace: str) -> None:
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        self.files = Files(chart)
        self.root = {"Values": values, "Release": {"Name": release, "Namespace": namespace},
                     "Chart": {"Name": meta["name"], "Version": meta["version"],
                               "AppVersion": meta.get("appVersion")}}

    # ---------------------------------------------------------------- expressions

    def _operand(self, tokens: list[str], scope: Scope) -> Any:
        token = tokens.pop(0)
        if token.startswith("$.Files."):
            token = token[1:]
        if token == "(":
            depth, inner = 1, []
            while depth:
                t = tokens.pop(0)
                depth += (t == "(") - (t == ")")
                if depth:
                    inner.append(t)
            return self._pipeline(inner, scope)
        if token.startswith('"'):
            return token[1:-1].encode().decode("unicode_escape")
        if re.fullmatch(r"-?\d+", token):
            return int(token)
        if token in (".Files.Get", ".Files.Glob"):
            arg = self._operand(tokens, scope)
            return self.files.get(arg) if token == ".Files.Get" else self.files.glob(arg)
        if token.startswith("$"):
            name, *parts = token.split(".")
            base = self.root if name == "$" else scope.variables.get(name, KeyError)
            if base is KeyError:
                raise TemplateError(f"undefined variable {name}")
            return _lookup(base, [p for p in parts if p], token)
        if token.startswith("."):
            return _lookup(self.root, token[1:].split("."), token)
        if token in FUNCS:
            args = []
            while tokens and tokens[0] not in ("|", ")"):
                args.append(self._operand(tokens, scope))
            return FUNCS[token](*args)
        raise TemplateError(f"unsupported token {token!r}")

    def _pipeline(self, tokens: list[str], scope: Scope) -> Any:
        stages: list[list[str]] = [[]]
        depth = 0
        for t in tokens:
            depth += (t == "(") - (t == ")")
            if t == "|" and depth == 0:
                stages.append([])
            else:
                stages[-1].append(t)
        value = self._operand(list(stages[0]), scope)
        for stage in stages[1:]:
            name, rest = stage[0], list(stage[1:])
            if name not in FUNCS:
                raise TemplateError(f"unsupported function {name!r}")
            args = []
            while rest:
                args.append(self._operand(rest, scope))
            value = FUNCS[name](*args, value)
        return value

    # ---------------------------------------------------------------- the template

    def render(self, text: str) -> str:
        pieces: list[tuple[str, str]] = []  # ("text", s) or ("action", s)
        pos = 0
        for match in ACTION.finditer(text):
            before = text[pos:match.start()]
            if match.group(1):
                before = before.rstrip()
            pieces.append(("text", before))
            pieces.append(("action", match.group(2)))
            pos = match.end()
            if match.group(3):
                rest = text[pos:]
                pos += len(rest) - len(rest.lstrip())
        pieces.append(("text", text[pos:]))
        out, index = self._block(pieces, 0, Scope(self.root))
        if index != len(pieces):
            raise TemplateError("unbalanced {{ end }}")
        return out

    def _block(self, pieces: list[tuple[str, str]], i: int, scope: Scope) -> tuple[str, int]:
        out: list[str] = []
        while i < len(pieces):
            kind, body = pieces[i]
            if kind == "text":
                out.append(body)
                i += 1
                continue
            tokens = _tokens(body)
            head = tokens[0] if tokens else ""
            if head in ("end", "else"):
                return "".join(out), i
            if head == "range":
                match = re.fullmatch(r"range\s+(\$\w+)\s*,\s*(\$\w+)\s*:=\s*(.+)", body, re.S)
                if match is None:
                    raise TemplateError(f"unsupported range: {body}")
                items = self._pipeline(_tokens(match.group(3)), scope) or {}
                end = self._skip(pieces, i + 1)
                for key in sorted(items):
                    inner = Scope(scope.root, {**scope.variables, match.group(1): key,
                                               match.group(2): items[key]})
                    text, _ = self._block(pieces, i + 1, inner)
                    out.append(text)
                i = end + 1
            elif head == "if":
                # Only the branch taken is rendered, as Go does (a `fail` elsewhere is inert).
                condition = self._pipeline(tokens[1:], scope)
                stop = self._skip(pieces, i + 1, at_else=True)
                has_else = pieces[stop][1].strip() == "else"
                end = self._skip(pieces, stop + 1) if has_else else stop
                if condition not in (None, "", False, 0, [], {}):
                    out.append(self._block(pieces, i + 1, scope)[0])
                elif has_else:
                    out.append(self._block(pieces, stop + 1, scope)[0])
                i = end + 1
            else:
                value = self._pipeline(tokens, scope)
                out.append("" if value is None else str(value))
                i += 1
        return "".join(out), i

    def _skip(self, pieces: list[tuple[str, str]], i: int, *, at_else: bool = False) -> int:
        """The index of the `end` that closes the block starting at `i` (or of its `else`)."""
        depth = 0
        while i < len(pieces):
            kind, body = pieces[i]
            if kind == "action":
                head = (_tokens(body) or [""])[0]
                if head in ("range", "if"):
                    depth += 1
                elif head == "end":
                    if depth == 0:
                        return i
                    depth -= 1
                elif head == "else" and at_else and depth == 0:
                    return i
            i += 1
        raise TemplateError("missing {{ end }}")


def render_chart(chart: Path, values: dict[str, Any] | None = None, *, release: str = "rota",
                 namespace: str = "rota") -> list[dict[str, Any]]:
    """Every manifest the chart's own templates make (not its dependencies'), as helm template
    would print them, parsed."""
    merged = yaml.safe_load((chart / "values.yaml").read_text())
    _deep_update(merged, values or {})
    renderer = Renderer(chart, merged, release, namespace)
    docs: list[dict[str, Any]] = []
    for template in sorted((chart / "templates").glob("*.yaml")):
        text = renderer.render(template.read_text())
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def _deep_update(target: dict[str, Any], changes: dict[str, Any]) -> None:
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _deep_update(target[key], value)
        else:
            target[key] = value

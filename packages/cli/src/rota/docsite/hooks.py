"""The MkDocs hook (mkdocs.yml `hooks:`): the site shows the repository's own Markdown.

The pages under docs/ link to files beside them in the repository (`../README.md`,
`../contracts/README.md`, `../policy/RESULTS.md`, a JSON Schema), which read well on a
forge but lie outside MkDocs' docs_dir, where `mkdocs build --strict` refuses them. This
hook adds every repository file a page links to (and, for Markdown, what that file links
to) to the site under `repo/<its path>`, and rewrites the links to point there. A link
that leaves the repository becomes its plain text, so the site never points outside it, and
one to a directory or a dot-file (which MkDocs does not publish) its name in code;
a link to a file that does not exist is left alone, for `--strict` to fail on.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

INCLUDED_UNDER = "repo"
_LINK = re.compile(r"(!?)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^\s*(```|~~~)")

# Site path (src_uri) of each page -> its path in the repository, for the pages this hook
# added; pages under docs_dir map to docs/<src_uri>.
_REPO_PATH_OF: dict[str, str] = {}


def _outside_fences(markdown: str, change: Callable[[str], str]) -> str:
    """Apply `change` to the text outside fenced code blocks only."""
    out: list[str] = []
    chunk: list[str] = []
    fenced = False
    for line in markdown.splitlines(keepends=True):
        if _FENCE.match(line):
            out.append(change("".join(chunk)) if not fenced else "".join(chunk))
            chunk = []
            fenced = not fenced
            out.append(line)
            continue
        chunk.append(line)
    out.append(change("".join(chunk)) if not fenced else "".join(chunk))
    return "".join(out)


def _relative_targets(markdown: str) -> Iterator[str]:
    found: list[str] = []

    def collect(text: str) -> str:
        found.extend(m["target"] for m in _LINK.finditer(text))
        return text

    _outside_fences(markdown, collect)
    for target in found:
        if not re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):
            yield target.split("#", 1)[0]


def _resolve(repo: Path, from_repo_path: str, target: str) -> str | None:
    """The repository path `target` names from the file at `from_repo_path`, None outside it."""
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(from_repo_path), target))
    if joined == ".." or joined.startswith("../"):
        return None
    if (repo / joined).is_dir() and (repo / joined / "README.md").is_file():
        joined = posixpath.join(joined, "README.md")
    return joined


def _hidden(repo_path: str) -> bool:
    """MkDocs leaves dot-files and dot-directories (.ci/run) out of the site."""
    return any(part.startswith(".") for part in repo_path.split("/"))


def on_files(files: Files, config: MkDocsConfig) -> Files:
    docs_dir = Path(config.docs_dir).resolve()
    repo = docs_dir.parent
    docs_prefix = docs_dir.name + "/"
    _REPO_PATH_OF.clear()
    todo = [(docs_prefix + f.src_uri, Path(f.abs_src_path)) for f in files.documentation_pages()
            if f.abs_src_path]
    while todo:
        repo_path, source = todo.pop()
        for target in _relative_targets(source.read_text(encoding="utf-8")):
            linked = _resolve(repo, repo_path, target)
            if (linked is None or linked.startswith(docs_prefix) or _hidden(linked)
                    or not (repo / linked).is_file()):
                continue
            site_path = f"{INCLUDED_UNDER}/{linked}"
            if site_path in _REPO_PATH_OF:
                continue
            _REPO_PATH_OF[site_path] = linked
            files.append(File.generated(config, site_path, abs_src_path=str(repo / linked)))
            if linked.endswith(".md"):
                todo.append((linked, repo / linked))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    docs_dir = Path(config.docs_dir).resolve()
    repo = docs_dir.parent
    docs_prefix = docs_dir.name + "/"
    src_uri = page.file.src_uri
    repo_path = _REPO_PATH_OF.get(src_uri, docs_prefix + src_uri)
    here = posixpath.dirname(src_uri)

    def rewrite(match: re.Match[str]) -> str:
        target = match["target"]
        if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):
            return match[0]
        path, _, anchor = target.partition("#")
        linked = _resolve(repo, repo_path, path)
        if linked is None:
            return match["text"]  # outside the repository: the site does not point there
        if linked.startswith(docs_prefix):
            site_path = linked[len(docs_prefix):]
        elif f"{INCLUDED_UNDER}/{linked}" in _REPO_PATH_OF:
            site_path = f"{INCLUDED_UNDER}/{linked}"
        elif (repo / linked).is_dir() or (_hidden(linked) and (repo / linked).exists()):
            # MkDocs publishes no dot-directory, and a bare directory has no page: name it.
            return f"`{match['text'].strip('`')}`" if match["text"] else match[0]
        else:
            return match[0]  # missing: --strict names it
        new = posixpath.relpath(site_path, here or ".") + (f"#{anchor}" if anchor else "")
        return f"{match[1]}[{match['text']}]({new}{match['title'] or ''})"

    def change(text: str) -> str:
        return _LINK.sub(rewrite, text)

    return _outside_fences(markdown, change)


__all__ = ["on_files", "on_page_markdown"]

"""MkDocs hooks of the docs site (`mkdocs.yml` `hooks:`): documents that live beside their code
(format/SPEC.md, benchmarks/README.md, deploy/README.md, ...) become pages of the site without a
copy, and a link written for GitHub (`../format/SPEC.md` in a docs page, `ingest/PROFILE.md` in
benchmarks/README.md) is pointed at the page or file that the site publishes for its target.

A link whose target does not exist is left as written, so `mkdocs build --strict` fails on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
DOCS = "docs"
# A repository document published as a page of the site: its path -> the page's path on the site.
# Add a line here to publish another one (and put its page in mkdocs.yml's nav).
MOUNTED = {
    "format/SPEC.md": "spec.md",
    "benchmarks/README.md": "benchmarks/index.md",
    "benchmarks/baselines/README.md": "benchmarks/baselines.md",
    "benchmarks/ingest/PROFILE.md": "benchmarks/ingest-profile.md",
    "deploy/README.md": "deploy.md",
}
# Other repository files a page links to (a plot, a manifest) are copied under this folder.
ASSETS = "repo"

_LINK = re.compile(r"(\]\()([^)\s]+)(\))")
_FENCE = re.compile(r"^\s*(```|~~~)")


def _repo_path(site_uri: str) -> str:
    """The repository path of a page's source."""
    for repo, uri in MOUNTED.items():
        if uri == site_uri:
            return repo
    return f"{DOCS}/{site_uri}"


def _target(source_repo_path: str, link: str) -> str | None:
    """The repository path a relative link of `source_repo_path` names, or None (a URL, an anchor)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", link) or link.startswith(("#", "/")):
        return None
    path = link.split("#", 1)[0]
    if not path:
        return None
    return posixpath.normpath(posixpath.join(posixpath.dirname(source_repo_path), path))


def _site_uri(repo_path: str) -> str | None:
    """Where the site publishes a repository file, or None (not a file: the link stays as written)."""
    if repo_path.startswith(f"{DOCS}/"):
        return repo_path[len(DOCS) + 1 :]
    if repo_path in MOUNTED:
        return MOUNTED[repo_path]
    if (ROOT / repo_path).is_file() and not repo_path.startswith(".."):
        return f"{ASSETS}/{repo_path}"
    return None


def _links(markdown: str) -> list[tuple[int, re.Match[str]]]:
    """Every `](link)` outside fenced code, with its line number."""
    found = []
    fenced = False
    for number, line in enumerate(markdown.splitlines()):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            found += [(number, m) for m in _LINK.finditer(line)]
    return found


def on_files(files: Files, config: Any) -> Files:
    """Add the mounted documents as pages, and the repository files any page links to as assets."""
    for repo_path, uri in MOUNTED.items():
        files.append(File.generated(config, uri, abs_src_path=str(ROOT / repo_path)))
    sources = [
        (f.src_uri, Path(f.abs_src_path).read_text())
        for f in files
        if f.src_uri.endswith(".md") and f.abs_src_path
    ]
    assets = set()
    for uri, text in sources:
        for _, match in _links(text):
            target = _target(_repo_path(uri), match.group(2))
            if target and not target.startswith(f"{DOCS}/") and target not in MOUNTED:
                site = _site_uri(target)
                if site is not None:
                    assets.add((site, target))
    for site, target in sorted(assets):
        files.append(File.generated(config, site, abs_src_path=str(ROOT / target)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Point each relative link at the site's copy of its target, relative to this page."""
    source = _repo_path(page.file.src_uri)
    here = posixpath.dirname(page.file.src_uri)
    lines = markdown.splitlines(keepends=True)
    for number, match in reversed(_links(markdown)):
        link = match.group(2)
        target = _target(source, link)
        site = _site_uri(target) if target else None
        if site is None:
            continue
        anchor = link[len(link.split("#", 1)[0]) :]
        new = posixpath.relpath(site, here or ".") + anchor
        line = lines[number]
        lines[number] = line[: match.start(2)] + new + line[match.end(2) :]
    return "".join(lines)

"""Write the figures the READMEs and docs pages quote from the committed JSON, so docs cannot go stale.

Each quoted table sits between two marker comments in a document:

    <!-- figures:scale (generated from benchmarks/baselines: do not edit) -->
    ...
    <!-- /figures:scale -->

and is replaced by what `benchmarks._doc_tables.BLOCKS["scale"]` makes of `benchmarks/baselines/`.
Commit a new baseline JSON, run this, commit the documents with it. The documents are
`documents(root)`: the three READMEs and every page of the docs site (`docs/**/*.md`), so a block
moved into a docs page is rendered there.

    python -m benchmarks.render_docs            # rewrite the blocks in place
    python -m benchmarks.render_docs --check    # exit 1 (and print the diff) where a document differs
    python -m benchmarks.render_docs --list     # the documents it renders, one a line

`--root DIR` works on another checkout (its documents and DIR/benchmarks/baselines/*.json).
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

from benchmarks._doc_tables import BLOCKS

ROOT = Path(__file__).resolve().parent.parent
READMES = ("README.md", "benchmarks/README.md", "benchmarks/baselines/README.md")
DOCS_DIR = "docs"  # the docs site's pages (mkdocs.yml `docs_dir`)
_BLOCK = re.compile(
    r"(<!-- figures:(?P<name>\w+)\b[^>]*-->\n)(?P<body>.*?)(<!-- /figures:(?P=name) -->)", re.S
)
_OPEN = re.compile(r"<!-- figures:(\w+)\b")


def documents(root: Path) -> list[str]:
    """The files whose figures blocks are rendered: the READMEs, then every docs page, sorted.

    The one list of them (the tests ask for it with `--list`).

    Example:
        >>> documents(ROOT)[:3]
        ['README.md', 'benchmarks/README.md', 'benchmarks/baselines/README.md']
    """
    pages = sorted(p.relative_to(root).as_posix() for p in (root / DOCS_DIR).rglob("*.md"))
    return [*READMES, *pages]


class RenderError(ValueError):
    """A README's markers are broken or name a block that does not exist."""


def render(text: str, baselines: Path, *, where: str = "README") -> str:
    """`text` with every figures block rewritten from `baselines`.

    Raises:
        RenderError: a block names no known table, or an opening marker has no closing one.

    Example:
        >>> doc = "<!-- figures:baselines -->\\nold\\n<!-- /figures:baselines -->"
        >>> render(doc, Path("benchmarks/baselines")).splitlines()[1]
        '| file | state of its figures |'
    """
    opened = _OPEN.findall(text)
    blocks = list(_BLOCK.finditer(text))
    if len(opened) != len(blocks):
        closed = {m.group("name") for m in blocks}
        raise RenderError(f"{where}: a figures block has no closing marker: {sorted(set(opened) - closed)}")
    unknown = sorted({m.group("name") for m in blocks} - set(BLOCKS))
    if unknown:
        raise RenderError(f"{where}: unknown figures block(s) {unknown}; known: {sorted(BLOCKS)}")
    return _BLOCK.sub(
        lambda m: m.group(1) + BLOCKS[m.group("name")](baselines).rstrip() + "\n" + m.group(4), text
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.render_docs", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 where a document differs"
    )
    parser.add_argument("--list", action="store_true", help="print the documents it renders and exit")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout (default: this one)")
    args = parser.parse_args(argv)
    baselines = args.root / "benchmarks" / "baselines"
    docs = documents(args.root)
    if args.list:
        print("\n".join(docs))
        return 0
    stale = []
    for name in docs:
        path = args.root / name
        text = path.read_text()
        try:
            new = render(text, baselines, where=name)
        except RenderError as err:
            print(f"render_docs: {err}", file=sys.stderr)
            return 2
        if new == text:
            continue
        stale.append(name)
        if args.check:
            diff = difflib.unified_diff(
                text.splitlines(), new.splitlines(), name, f"{name} (rendered)", lineterm=""
            )
            print("\n".join(diff))
        else:
            path.write_text(new)
            print(f"render_docs: wrote {name}")
    if args.check and stale:
        print(
            f"render_docs: {', '.join(stale)} differ from the committed JSON: run "
            "`python -m benchmarks.render_docs` and commit the result",
            file=sys.stderr,
        )
        return 1
    if args.check:
        print(f"render_docs: {', '.join(docs)} match benchmarks/baselines")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""MkDocs hook: links from a page to files of the repository outside docs/ (a results table, a script).

The site holds docs/ only, so such a link (``[bm25.md](../benchmarks/results/bm25.md)``) would be broken there. The
hook checks that the file exists in the repository, warning when it does not (``mkdocs build --strict`` then
fails, as for any broken link), and shows it as the path in code, which reads the same on the site and on GitHub.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path, PurePosixPath

log = logging.getLogger("mkdocs.plugins.repo_links")
_OUTSIDE = re.compile(r"\[([^\]]+)\]\((\.\./[^)\s#]+)(#[^)\s]*)?\)")


def on_page_markdown(markdown: str, page, config, files) -> str:
    docs = Path(config["docs_dir"]).resolve()
    root = docs.parent
    folder = (docs / page.file.src_uri).parent

    def replace(match: re.Match) -> str:
        text, target = match[1], match[2]
        resolved = (folder / target).resolve()
        if not resolved.is_relative_to(root) or not resolved.exists():
            log.warning("%s links to %s, which is not a file of the repository", page.file.src_uri, target)
            return match[0]
        path = PurePosixPath(resolved.relative_to(root)).as_posix()
        return f"`{path}`" if text.strip("`") in (path, PurePosixPath(path).name) else f"{text} (`{path}`)"

    return _OUTSIDE.sub(replace, markdown)

"""MkDocs hook: the user-guide pages are the packages' READMEs, written to be read on GitHub.

A page whose first line is ``<!-- include: path/to/FILE.md -->`` gets that file's text, with
each relative link rewritten from the file's place in the repository to the page it points to
on the site (``docs/X.md`` -> ``X.md``, a package README -> its guide page, the root README ->
the getting-started page). The docs pages' own links to READMEs are rewritten the same way.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = re.compile(r"^<!-- include: (\S+) -->\s*$", re.M)
LINK = re.compile(r"(\]\()([^)\s#]+)(#[^)\s]*)?(\))")
#: repository files that are pages of the site: repo path -> page path under docs/
PAGES = {"README.md": "guide/getting-started.md", "packages/orca/README.md": "guide/getting-started.md",
         **{f"packages/orca-{p}/README.md": f"guide/{p}.md" for p in ("core", "torch", "tf", "mxnet", "bigdl",
                                                                      "openvino")}}


def _site_target(origin_dir: str, target: str) -> str | None:
    """The docs/ path of the page a link from ``origin_dir`` (repo-relative) to ``target`` means."""
    if re.match(r"^[a-z]+:", target) or target.startswith("/"):
        return None
    repo_path = posixpath.normpath(posixpath.join(origin_dir, target))
    if repo_path in PAGES:
        return PAGES[repo_path]
    if repo_path.startswith("docs/") and (ROOT / repo_path).exists():
        return repo_path[len("docs/"):]
    return None


def _rewrite(text: str, origin: str, page: str) -> str:
    origin_dir, page_dir = posixpath.dirname(origin), posixpath.dirname(page)

    def fix(m: re.Match[str]) -> str:
        site = _site_target(origin_dir, m.group(2))
        if site is None:
            return m.group(0)
        rel = posixpath.relpath(site, page_dir or ".")
        return f"{m.group(1)}{rel}{m.group(3) or ''}{m.group(4)}"

    return LINK.sub(fix, text)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    page_path = page.file.src_uri
    found = INCLUDE.match(markdown)
    if found:
        origin = found.group(1)
        return _rewrite((ROOT / origin).read_text(), origin, page_path)
    return _rewrite(markdown, f"docs/{page_path}", page_path)

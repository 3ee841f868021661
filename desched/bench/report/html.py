"""``report.html``: the same text as ``report.md``, rendered for a browser, with the plots
as the PNG files beside it (relative links, nothing inlined), so the folder opens as a page."""

from __future__ import annotations

import html
import re
from pathlib import Path

STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 74rem; margin: 2rem auto;
       padding: 0 1rem; color: #1b1b1b; }
h1 { font-size: 1.6rem; } h2 { margin-top: 2.2rem; border-bottom: 1px solid #ddd; }
h3 { margin-top: 1.6rem; }
table { border-collapse: collapse; margin: 0.6rem 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
img { max-width: 100%; height: auto; display: block; margin: 0.6rem 0; }
code { background: #f4f4f4; padding: 0 0.2rem; }
hr { margin: 3rem 0; }
"""


def render_html(markdown: str, title: str) -> str:
    """A standalone HTML page of ``markdown`` (CommonMark with tables)."""
    from markdown_it import MarkdownIt

    body = MarkdownIt("commonmark").enable("table").render(markdown)
    return ("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n"
            f"<body>\n{body}</body>\n</html>\n")


def image_sources(page: str) -> list[str]:
    """The ``src`` of every ``<img>`` of an HTML page, in order."""
    return re.findall(r"<img [^>]*src=\"([^\"]+)\"", page)


def write_html(folder: Path, markdown: str, title: str) -> Path:
    """Write ``report.html`` into ``folder`` beside the PNGs the markdown links to."""
    out = folder / "report.html"
    out.write_text(render_html(markdown, title))
    return out

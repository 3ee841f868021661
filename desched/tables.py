"""Markdown tables, one way, for every report, card, artifact and command output.

``markdown_table(head, rows, align)`` writes a GitHub-flavoured table: cells are ``str()``-ed,
a ``|`` inside a cell is escaped, ``align`` gives each column ``"l"`` or ``"r"`` (default all
left, written ``---``; right is ``---:``). The CLI renders the same text with rich on a
terminal (``desched.cli.output.echo_markdown``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

_RULE = {"l": "---", "r": "---:"}


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def table_lines(
    head: Sequence[object], rows: Iterable[Sequence[object]], align: str | None = None
) -> list[str]:
    """The lines of the table; ``align`` is one letter per column (``"lrr"``)."""
    width = len(head)
    letters = align or "l" * width
    if len(letters) != width or set(letters) - set(_RULE):
        raise ValueError(f"align {align!r}: one of l/r per column ({width} columns)")
    lines = ["| " + " | ".join(_cell(h) for h in head) + " |",
             "|" + "|".join(_RULE[a] for a in letters) + "|"]
    for row in rows:
        if len(row) != width:
            raise ValueError(f"row {list(row)!r} has {len(row)} cells, the head {width}")
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return lines


def markdown_table(
    head: Sequence[object], rows: Iterable[Sequence[object]], align: str | None = None
) -> str:
    """The table as one string (no trailing newline)."""
    return "\n".join(table_lines(head, rows, align))

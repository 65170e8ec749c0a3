"""Escaping text for the generated README.md: every string it interpolates goes through
:func:`md` (prose and table cells) or :func:`code` (a code span), so that no name, title,
version or number from a suite or a submission can open markup, raw HTML, a link or a
table cell of its own.

Both collapse whitespace (newlines included) to single spaces, so an interpolated value
stays on its line: it cannot start a heading, a list or a new table row.
"""
from __future__ import annotations

import re
from typing import Any

#: always escaped (CommonMark escapes any ASCII punctuation with a backslash): the
#: backslash itself, code spans, emphasis, strikethrough, math, links and images, raw
#: HTML and autolinks, entities, table cells
_ALWAYS = set("\\`*~$[]<&|")
#: escaped where a value starts a line: headings, block quotes, lists, setext underlines
_LEADING = set("#>+-=")


def _one_line(text: Any) -> str:
    return " ".join(str(text).split())


def md(text: Any) -> str:
    """``text`` as literal Markdown text: markup characters backslash-escaped.

    ``_`` is left alone between two letters or digits (``d_model``), where it can neither
    open nor close emphasis; elsewhere it is escaped too.
    """
    s = _one_line(text)
    out = []
    for i, ch in enumerate(s):
        if ch in _ALWAYS or (i == 0 and ch in _LEADING):
            out.append("\\" + ch)
        elif ch == "_" and not (0 < i < len(s) - 1 and s[i - 1].isalnum() and s[i + 1].isalnum()):
            out.append("\\_")
        else:
            out.append(ch)
    escaped = "".join(out)
    # "1. " or "1) " opening the value would start an ordered list
    return re.sub(r"^([0-9]{1,9})([.)])(?= |$)", r"\1\\\2", escaped)


def code(text: Any) -> str:
    """``text`` as one code span that its content cannot close: fenced by one backtick
    more than its longest run of backticks, padded with a space where it starts or ends
    with one (CommonMark strips that space).  Not for table cells (``|`` splits them)."""
    s = _one_line(text)
    if not s:
        return ""
    fence = "`" * (max((len(run) for run in re.findall(r"`+", s)), default=0) + 1)
    pad = " " if s[0] == "`" or s[-1] == "`" else ""
    return f"{fence}{pad}{s}{pad}{fence}"

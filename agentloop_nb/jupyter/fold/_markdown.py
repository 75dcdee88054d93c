"""Sanitised Markdown for finished assistant messages (markdown-it-py, raw HTML disabled).

With ``html`` off, any HTML in a model's answer is shown as text, never parsed; markdown-it's
link validation refuses ``javascript:``, ``vbscript:``, ``file:`` and non-image ``data:`` URLs
(such a link stays literal text). Links open in a new tab and carry no referrer. A ``*``
between two digits is arithmetic, not emphasis (``6*7 is 42 and 12*12`` would otherwise lose
both stars to an italic run): it is escaped outside code spans and fenced blocks.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from markdown_it import MarkdownIt


def _link_open(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
    tokens[idx].attrSet("target", "_blank")
    tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
    return str(renderer.renderToken(tokens, idx, options, env))


@cache
def _parser() -> MarkdownIt:
    """The one parser, built with the first finished answer shown (markdown-it is some 60
    modules: ``%load_ext`` and a kernel that shows no answer do not load it)."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.add_render_rule("link_open", _link_open)
    return md


# Fenced blocks and code spans keep their text as written (a backslash would show there).
_CODE = re.compile(r"(```.*?(?:```|\Z)|~~~.*?(?:~~~|\Z)|`[^`\n]*`)", re.S)
_TIMES = re.compile(r"(?<=\d)\*(?=\d)")


def _escape_products(text: str) -> str:
    parts = _CODE.split(text)
    # split() with one group: even indices are prose, odd ones the code it cut out.
    return "".join(p if k % 2 else _TIMES.sub(r"\\*", p) for k, p in enumerate(parts))


def markdown_html(text: str) -> str:
    """``text`` rendered as sanitised HTML (no raw HTML, no scripts, no unsafe links)."""
    return _parser().render(_escape_products(text) if "*" in text else text)


__all__ = ["markdown_html"]

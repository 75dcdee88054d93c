"""Sanitised Markdown for finished assistant messages (markdown-it-py, raw HTML disabled).

With ``html`` off, any HTML in a model's answer is shown as text, never parsed; markdown-it's
link validation refuses ``javascript:``, ``vbscript:``, ``file:`` and non-image ``data:`` URLs
(such a link stays literal text). Links open in a new tab and carry no referrer.
"""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt

_MD = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
_MD.enable(["table", "strikethrough"])


def _link_open(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
    tokens[idx].attrSet("target", "_blank")
    tokens[idx].attrSet("rel", "noopener noreferrer nofollow")
    return str(renderer.renderToken(tokens, idx, options, env))


_MD.add_render_rule("link_open", _link_open)


def markdown_html(text: str) -> str:
    """``text`` rendered as sanitised HTML (no raw HTML, no scripts, no unsafe links)."""
    return _MD.render(text)


__all__ = ["markdown_html"]

"""The event fold: session events folded into display items, rendered as text and escaped HTML.

No widgets here: this room turns a session log (plus ``tools/settled``) into what the views
show — :class:`Transcript` (per-turn items, usage, errors), :class:`SessionFeed` (one fold
shared by every view of a session), the renderers and :func:`router` (one listener per hook
and dispatcher, held by the dispatching context). ``view`` and ``kernel`` build on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..._lazy import LazyExports

if TYPE_CHECKING:
    from ._code import code_html
    from ._feed import SETTLED, Observer, SessionFeed
    from ._item import CHUNK_TYPES, Item
    from ._render import end_label, item_html, item_text, pretty_args
    from ._routes import Router, router
    from ._style import STYLE
    from ._transcript import Transcript, content_text

# Each room loads with the first use of one of its names (start-up cost of %load_ext).
_EXPORTS = LazyExports(
    __name__,
    {
        "._code": ("code_html",),
        "._feed": ("SETTLED", "Observer", "SessionFeed"),
        "._item": ("CHUNK_TYPES", "Item"),
        "._render": ("end_label", "item_html", "item_text", "pretty_args"),
        "._routes": ("Router", "router"),
        "._style": ("STYLE",),
        "._transcript": ("Transcript", "content_text"),
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.load(name)


__all__ = [
    "CHUNK_TYPES",
    "SETTLED",
    "STYLE",
    "Item",
    "Observer",
    "Router",
    "SessionFeed",
    "Transcript",
    "code_html",
    "content_text",
    "end_label",
    "item_html",
    "item_text",
    "pretty_args",
    "router",
]

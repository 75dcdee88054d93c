"""What every view shares: the full-text ``text/plain`` repr, the feed helper, the stylesheet
widget."""

from __future__ import annotations

from typing import Any

import ipywidgets as widgets

from ..fold import STYLE, SessionFeed


class TextRepr:
    """Full text transcript as the ``text/plain`` of the display bundle (ipywidgets cuts its
    plain-text repr at 110 characters; a console or a notebook without a front end should see
    the whole transcript)."""

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        data: dict[str, Any] | None = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        if data is not None:
            data["text/plain"] = repr(self)
        return data


def feed_for(session: Any, ctx: Any, feed: SessionFeed | None) -> tuple[SessionFeed, bool]:
    """``(feed, owned)``: the given feed, or a new one the caller owns (and closes)."""
    if feed is not None:
        return feed, False
    return SessionFeed(session, ctx), True


def style_widget(extra: str = "") -> widgets.HTML:
    """An invisible widget holding the views' stylesheet (plus ``extra`` rules)."""
    # A <style> applies wherever it sits in the document, even inside a hidden element.
    w = widgets.HTML(value=f"<style>{STYLE}{extra}</style>", layout=widgets.Layout(display="none"))
    w.add_class("agentloop-style")
    return w


__all__ = ["TextRepr", "feed_for", "style_widget"]

"""Rendering transcript items as plain text and as escaped HTML.

Every HTML fragment escapes all text it shows and carries stable CSS classes
(``agentloop-user``, ``agentloop-assistant``, ``agentloop-reasoning``, ``agentloop-tool-call``,
``agentloop-turn-start``, ``agentloop-turn-end``, ``agentloop-error``, ``agentloop-retry``,
``agentloop-usage``) that browser tests and user CSS can select. Fragments carry no colours:
:data:`~._style.STYLE` styles the classes with JupyterLab's theme variables (``--jp-*``) only, so the
light and the dark theme both stay readable. A finished assistant message is sanitised
Markdown (:func:`~._markdown.markdown_html`); while it streams it is plain text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from html import escape
from typing import Any

from ._item import Item
from ._markdown import markdown_html

RESULT_PREVIEW = 2000
"""Characters of a tool result shown (the log keeps all of it)."""


def reason_text(reason: Mapping[str, Any] | None) -> str:
    """``completed``, ``aborted (user)``, ``error AUTH: ...`` from a ``turn/end`` reason."""
    if not reason:
        return "unknown"
    kind = str(reason.get("kind", "unknown"))
    if kind == "aborted":
        cause = reason.get("cause") or {}
        return f"aborted ({cause.get('kind', '?')})"
    if kind == "error":
        code = str(reason.get("code", "UNKNOWN"))
        return f"error {code}: {error_message(code, reason.get('message'))}"
    if kind == "rejected" and reason.get("reason"):
        return f"rejected: {reason['reason']}"
    return kind


def _cost(d: Mapping[str, Any]) -> str:
    """``", $0.0123"`` for a known cost; nothing when a part of the usage has no price."""
    cost = d.get("cost_usd")
    return f", ${cost:.4f}" if isinstance(cost, int | float) else ""


def _compaction_label(d: Mapping[str, Any]) -> str:
    """What a compaction marker says before it is opened."""
    span = f"messages {d.get('start')}–{d.get('end')} summarised"
    before, after = d.get("tokens_before"), d.get("tokens_after")
    size = f", ~{before} → ~{after} tokens" if before is not None and after is not None else ""
    why = f" ({d['reason']})" if d.get("reason") else ""
    return span + size + why


def error_message(code: str, message: Any) -> str:
    """``message`` without a leading ``CODE:``: turn ends carry the bare message, but logs
    written by earlier versions repeated the code in it; the view shows the code once."""
    text = str(message or "")
    prefix = f"{code}:"
    return text[len(prefix) :].lstrip() if text.startswith(prefix) else text


def end_text(reason: Mapping[str, Any] | None, *, shown: bool = False) -> str:
    """A ``turn/end`` reason for a turn boundary or the status line: an error already shown
    in the turn (``shown``) is named by its code alone, so it reads once."""
    if shown and reason and reason.get("kind") == "error":
        return f"error {reason.get('code', 'UNKNOWN')} (above)"
    return reason_text(reason)


def end_label(reason: Mapping[str, Any] | None) -> str:
    """A ``turn/end`` reason in a few words (an error by its code only): the status line's."""
    if reason and reason.get("kind") == "error":
        return f"error {reason.get('code', 'UNKNOWN')}"
    return reason_text(reason)


def result_text(content: Any) -> str:
    """A tool result as text: a string as is (a JSON object or list of one is laid out as
    ``key: value`` lines), content blocks as their text (images as ``[image]``), any other
    JSON value laid out the same way."""
    if isinstance(content, str):
        try:
            value = json.loads(content)
        except ValueError:
            return content
        if not isinstance(value, dict | list):
            return content
        content = value
    if isinstance(content, list | tuple) and all(
        isinstance(b, Mapping) and "type" in b for b in content
    ):
        out = []
        for block in content:
            if block.get("type") == "text":
                out.append(str(block.get("text", "")))
            elif block.get("type") == "image":
                out.append("[image]")
        return "\n".join(out)
    return _layout(content)


def _layout(value: Any, indent: str = "") -> str:
    if isinstance(value, Mapping):
        lines = []
        for key, v in value.items():
            if isinstance(v, Mapping | list | tuple) and v:
                lines.append(f"{indent}{key}:\n{_layout(v, indent + '  ')}")
            else:
                lines.append(f"{indent}{key}: {_scalar(v)}")
        return "\n".join(lines)
    if isinstance(value, list | tuple):
        return "\n".join(
            f"{indent}- {_layout(v, indent + '  ').lstrip()}"
            if isinstance(v, Mapping | list | tuple)
            else f"{indent}- {_scalar(v)}"
            for v in value
        )
    return f"{indent}{_scalar(value)}"


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, ensure_ascii=False)  # for people: spaced, not the wire form
    return str(value)


def pretty_args(raw: str) -> str:
    """Tool arguments for display: compact JSON when valid, the raw string otherwise."""
    try:
        return json.dumps(json.loads(raw), ensure_ascii=False) if raw else "{}"
    except ValueError:
        return raw


def _duration(item: Item) -> str:
    """`` (1.23s)`` for a finished call whose body ran, else ``""``: from its ``tool/call``
    to its settling (or, without one, its ``tool/result``), less its wait for approval."""
    d = item.data
    if d.get("ran") is False:
        return ""
    started, ended = d.get("started"), d.get("ended")
    if started is None or ended is None:
        return ""
    return f" ({max(0.0, ended - started - d.get('waited', 0.0)):.2f}s)"


def item_text(item: Item) -> str:
    d = item.data
    k = item.kind
    if k == "turn-start":
        return f"── turn {d['turn']} ──"
    if k == "turn-end":
        return f"── turn {d['turn']} ended: {end_text(d['reason'], shown=d.get('shown', False))} ──"
    if k == "user":
        label = "user" if d["source"] == "user" else f"user/{d['source']}"
        return f"[{label}] {d['text']}"
    if k == "assistant":
        cut = " [interrupted]" if d.get("interrupted") else ""
        return f"assistant: {item.text}{cut}"
    if k == "reasoning":
        return f"(reasoning) {item.text}"
    if k == "tool":
        args = pretty_args(item.text)  # first: a streamed call learns its name here
        result = d.get("result")
        tail = f" → {result_text(result)[:200]}" if result is not None else ""
        return f"tool {d.get('name')}({args}) [{d['state']}]{_duration(item)}{tail}"
    if k == "usage":
        u = d["usage"]
        return f"(tokens in {u.get('input_tokens', 0)}, out {u.get('output_tokens', 0)}{_cost(d)})"
    if k == "compaction":
        return f"(compacted: {_compaction_label(d)})"
    if k == "error":
        return f"! {d['where']} error {d['code']}: {error_message(d['code'], d['message'])}"
    if k == "retry":
        return f"! retry {d['attempt']} after {d['code']} in {d['delay']}s"
    return ""


def item_html(item: Item) -> str:
    """The escaped HTML fragment of one item (cached until the item changes)."""
    cached = item.html
    if cached is not None:
        return cached
    html = _render(item)
    # A streaming item changes again soon: caching it would only cost memory churn.
    if not item.data.get("streaming") and item.data.get("state") not in ("streaming", "running"):
        item.html = html
    return html


def _render(item: Item) -> str:
    d = item.data
    k = item.kind
    if k == "turn-start":
        return f'<div class="agentloop-turn-start agentloop-muted">turn {d["turn"]}</div>'
    if k == "turn-end":
        kind = escape(str((d["reason"] or {}).get("kind", "unknown")))
        text = end_text(d["reason"], shown=d.get("shown", False))
        return (
            f'<div class="agentloop-turn-end agentloop-turn-end-{kind} agentloop-muted">'
            f"turn {d['turn']} ended: {escape(text)}</div>"
        )
    if k == "user":
        source = escape(d["source"])
        return (
            f'<div class="agentloop-box agentloop-user agentloop-plain agentloop-source-{source}">'
            f"<b>{source}</b>: {escape(d['text'])}</div>"
        )
    if k == "assistant":
        return _assistant(item)
    if k == "reasoning":
        opened = " open" if d.get("streaming") else ""
        return (
            f'<details class="agentloop-box agentloop-reasoning"{opened}>'
            f"<summary>reasoning</summary>{escape(item.text)}</details>"
        )
    if k == "tool":
        return _tool(item)
    if k == "usage":
        u = d["usage"]
        return (
            f'<div class="agentloop-usage agentloop-muted">tokens in '
            f"{int(u.get('input_tokens', 0))}, out {int(u.get('output_tokens', 0))}"
            f"{escape(_cost(d))}</div>"
        )
    if k == "compaction":
        return (
            '<details class="agentloop-box agentloop-compaction agentloop-muted">'
            f"<summary>compacted: {escape(_compaction_label(d))}</summary>"
            f'<div class="agentloop-plain">{escape(str(d.get("summary", "")))}</div></details>'
        )
    if k == "error":
        code = str(d["code"])
        return (
            f'<div class="agentloop-box agentloop-error">{escape(d["where"])} error '
            f"<b>{escape(code)}</b>: {escape(error_message(code, d['message']))}</div>"
        )
    if k == "retry":
        return (
            f'<div class="agentloop-retry agentloop-muted">retry '
            f"{escape(str(d['attempt']))} after {escape(str(d['code']))} in "
            f"{escape(str(d['delay']))}s</div>"
        )
    return ""


def _assistant(item: Item) -> str:
    d = item.data
    cut = (
        ' <span class="agentloop-interrupted">[interrupted]</span>' if d.get("interrupted") else ""
    )
    if d.get("streaming"):
        return (
            '<div class="agentloop-box agentloop-assistant agentloop-streaming agentloop-plain">'
            f"{escape(item.text)}{cut}</div>"
        )
    return f'<div class="agentloop-box agentloop-assistant">{markdown_html(item.text)}{cut}</div>'


def _tool(item: Item) -> str:
    d = item.data
    args = pretty_args(item.text)  # first: a streamed call learns its name here
    state = d["state"]
    result = d.get("result")
    body = ""
    if result is not None:
        shown = result_text(result)
        shown = shown if len(shown) <= RESULT_PREVIEW else shown[:RESULT_PREVIEW] + "…"
        body = f'<div class="agentloop-tool-result">{escape(shown)}</div>'
    return (
        f'<div class="agentloop-box agentloop-tool-call agentloop-tool-{state.replace(" ", "-")}">'
        f"<b>{escape(str(d.get('name')))}</b><code>({escape(args)})</code> "
        f'<span class="agentloop-tool-state">{state}</span>'
        f"{escape(_duration(item))}{body}</div>"
    )

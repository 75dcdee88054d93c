"""Map an MCP ``CallToolResult`` onto the pipeline's ``ToolResult``.

Text parts (and embedded text resources) become the result's text; image parts become
``ImageBlock`` content, so a result with images has block content (text blocks and image
blocks in the server's order) and providers send the images to the model. Parts that have no
content block here (audio, links, binary resources) become a short text marker.
``meta["mcp"]`` holds only ``{"server", "tool"}``. ``isError`` becomes a ``TOOL_ERROR`` error
result whose message is the server's text (its images are dropped: an error is text).
"""

from __future__ import annotations

import json
from typing import Any

from ..messages import ImageBlock, TextBlock
from ..tools import TOOL_ERROR, ToolResult, error_result

__all__ = ["to_tool_result"]


def _part(item: Any) -> str | ImageBlock:
    """The text the model sees for one MCP content item, or its image block."""
    kind = getattr(item, "type", None)
    if kind == "text":
        return str(item.text)
    if kind == "image":
        return ImageBlock(media_type=str(item.mime_type), data=str(item.data))
    if kind == "audio":
        return f"[audio: {item.mime_type}]"
    if kind == "resource":
        resource = item.resource
        embedded = getattr(resource, "text", None)
        return embedded if isinstance(embedded, str) else f"[resource: {resource.uri}]"
    if kind == "resource_link":
        return f"[resource link: {item.uri}]"
    return f"[{kind} content]"


def _blocks(parts: list[str | ImageBlock]) -> list[TextBlock | ImageBlock]:
    """``parts`` in order, runs of text joined by newlines into one ``TextBlock``."""
    blocks: list[TextBlock | ImageBlock] = []
    run: list[str] = []
    for part in parts:
        if isinstance(part, str):
            run.append(part)
            continue
        if run:
            blocks.append(TextBlock(text="\n".join(run)))
            run = []
        blocks.append(part)
    if run:
        blocks.append(TextBlock(text="\n".join(run)))
    return blocks


def to_tool_result(server: str, tool: str, result: Any) -> ToolResult:
    """The ``ToolResult`` for ``result`` (an SDK ``CallToolResult``) of ``server``'s ``tool``.

    The content is a string when the result has no image, else a tuple of text and image
    blocks."""
    parts = [_part(item) for item in result.content or ()]
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        # text for the model, spaced as JSON usually reads (not the wire form)
        parts.append(json.dumps(structured, ensure_ascii=False))
    texts = [part for part in parts if isinstance(part, str)]
    meta = {"mcp": {"server": server, "tool": tool}}
    if result.is_error:
        message = "\n".join(texts) or f"MCP tool {tool!r} of server {server!r} reported an error"
        return error_result(TOOL_ERROR, message, meta=meta)
    if len(texts) == len(parts):
        return ToolResult(content="\n".join(texts), meta=meta)
    return ToolResult(content=tuple(_blocks(parts)), meta=meta)

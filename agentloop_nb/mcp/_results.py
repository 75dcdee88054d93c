"""Map an MCP ``CallToolResult`` onto the pipeline's ``ToolResult``.

The model-visible content of a tool result is text, so text parts are joined; every part is
also kept, as JSON content blocks, under ``meta["mcp"]["content"]`` (images as ``image``
blocks with their base64 data) for observers, the log and the notebook view. ``isError``
becomes a ``TOOL_ERROR`` error result whose message is the server's text.
"""

from __future__ import annotations

import json
from typing import Any

from ..messages import ImageBlock, TextBlock
from ..tools import TOOL_ERROR, ToolResult, error_result

__all__ = ["to_tool_result"]


def _part(item: Any) -> tuple[str, dict[str, Any] | None]:
    """``(text the model sees, content block or None)`` for one MCP content item."""
    kind = getattr(item, "type", None)
    if kind == "text":
        text = str(item.text)
        return text, TextBlock(text=text).model_dump(mode="json")
    if kind == "image":
        media_type = str(item.mime_type)
        block = ImageBlock(media_type=media_type, data=str(item.data))
        return f"[image: {media_type}]", block.model_dump(mode="json")
    if kind == "audio":
        return f"[audio: {item.mime_type}]", None
    if kind == "resource":
        resource = item.resource
        embedded = getattr(resource, "text", None)
        if isinstance(embedded, str):
            return embedded, TextBlock(text=embedded).model_dump(mode="json")
        return f"[resource: {resource.uri}]", None
    if kind == "resource_link":
        return f"[resource link: {item.uri}]", None
    return f"[{kind} content]", None


def to_tool_result(server: str, tool: str, result: Any) -> ToolResult:
    """The ``ToolResult`` for ``result`` (an SDK ``CallToolResult``) of ``server``'s ``tool``."""
    texts: list[str] = []
    blocks: list[dict[str, Any]] = []
    for item in result.content or ():
        text, block = _part(item)
        texts.append(text)
        if block is not None:
            blocks.append(block)
    structured = getattr(result, "structured_content", None)
    if not texts and structured is not None:
        texts.append(json.dumps(structured, ensure_ascii=False))
    content = "\n".join(texts)
    meta = {"mcp": {"server": server, "tool": tool, "content": blocks}}
    if result.is_error:
        message = content or f"MCP tool {tool!r} of server {server!r} reported an error"
        return error_result(TOOL_ERROR, message, meta=meta)
    return ToolResult(content=content, meta=meta)

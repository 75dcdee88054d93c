"""The providers' wire formats, for hand-written streams and for the request bodies tests
expect: Anthropic Messages events, OpenAI Chat Completions chunks, and the tool-call and
tool-result entries each API wants sent back."""

from __future__ import annotations

from typing import Any

from peers.loopback import sse_events

Event = tuple[str | None, Any]

# -- Anthropic Messages events ------------------------------------------------------------------


def message_start(input_tokens: int = 5, output_tokens: int | None = 1) -> Event:
    usage = {"input_tokens": input_tokens}
    if output_tokens is not None:
        usage["output_tokens"] = output_tokens
    return ("message_start", {"type": "message_start", "message": {"usage": usage}})


def block_start(index: int, content_block: dict[str, Any] | None = None) -> Event:
    """``content_block_start``; an empty text block unless ``content_block`` is given."""
    block = content_block if content_block is not None else {"type": "text", "text": ""}
    return (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": block},
    )


def block_delta(index: int, delta: dict[str, Any]) -> Event:
    return ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


def text_delta(index: int, text: str) -> Event:
    return block_delta(index, {"type": "text_delta", "text": text})


def block_stop(index: int) -> Event:
    return ("content_block_stop", {"type": "content_block_stop", "index": index})


def message_delta(stop_reason: str, output_tokens: int) -> Event:
    return (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason},
            "usage": {"output_tokens": output_tokens},
        },
    )


def message_stop() -> Event:
    return ("message_stop", {"type": "message_stop"})


def anthropic_text_stream(text: str = "Hi!", *, stop_reason: str = "end_turn") -> bytes:
    """A whole Messages stream answering ``text`` in one text block."""
    return sse_events(
        [
            message_start(),
            block_start(0),
            text_delta(0, text),
            block_stop(0),
            message_delta(stop_reason, 3),
            message_stop(),
        ]
    )


# -- OpenAI Chat Completions chunks -------------------------------------------------------------


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    """One ``chat.completion.chunk`` for choice 0."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def openai_body(*chunks: dict[str, Any], done: bool = True) -> bytes:
    """An SSE body of ``chunks``, ended by ``data: [DONE]`` when ``done``."""
    events: list[Event] = [(None, c) for c in chunks]
    if done:
        events.append((None, "[DONE]"))
    return sse_events(events)


# -- what the adapters send back ----------------------------------------------------------------


def anthropic_tool_use(call_id: str, name: str, input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": input}


def anthropic_tool_result(call_id: str, content: str, **extra: Any) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content, **extra}


def openai_tool_call_message(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """An assistant message that only calls one tool."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        ],
    }

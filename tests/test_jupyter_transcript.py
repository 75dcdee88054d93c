"""``Transcript``: session events folded into items, the streamed blocks by the assembler's
rules, and the text each item renders as."""

from __future__ import annotations

from typing import Any

from agentloop_nb.jupyter import Transcript
from agentloop_nb.jupyter.fold import item_html, item_text
from agentloop_nb.llm import (
    BlockEnd,
    BlockStart,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallDelta,
    assemble,
)
from agentloop_nb.messages import ReasoningBlock


def test_transcript_folds_a_history_without_chunks() -> None:
    class E:
        def __init__(self, type: str, data: dict[str, Any]) -> None:
            self.type, self.data, self.time = type, data, 1.0

    t = Transcript()
    t.feed_all(
        [
            E("turn/start", {"turn": 1}),
            E(
                "assistant/message",
                {
                    "turn": 1,
                    "step": 1,
                    "message": {
                        "role": "assistant",
                        "content": [
                            {"type": "text", "text": "calling"},
                            {
                                "type": "tool-call",
                                "id": "c1",
                                "name": "echo",
                                "arguments": '{"a":1}',
                            },
                        ],
                    },
                },
            ),
            E(
                "tool/call",
                {"turn": 1, "step": 1, "call_id": "c1", "name": "echo", "arguments": "{}"},
            ),
            E(
                "tool/result",
                {
                    "turn": 1,
                    "step": 1,
                    "call_id": "c1",
                    "content": "x",
                    "is_error": True,
                    "error": {"code": "ABORTED", "message": "stop"},
                },
            ),
        ]
    )
    assert [i.kind for i in t.items] == ["turn-start", "assistant", "tool"]
    assert t.items[2].data["state"] == "aborted"
    assert t.pool == [t.items[2]]


def test_transcript_shows_no_duration_for_calls_refused_or_never_dispatched() -> None:
    class E:
        def __init__(self, type: str, data: dict[str, Any], time: float) -> None:
            self.type, self.data, self.time = type, data, time

    codes = {
        "u": ("UNKNOWN_TOOL", "invalid"),
        "i": ("INVALID_ARGS", "invalid"),
        "d": ("DENIED", "denied"),
        "b": ("ABORTED_BEFORE_DISPATCH", "aborted"),
        "x": ("TOOL_ERROR", "failed"),
    }
    t = Transcript()
    for call_id, (code, _) in codes.items():
        base = {"turn": 1, "step": 1, "call_id": call_id, "name": "f"}
        t.feed(E("tool/call", {**base, "arguments": "{}"}, 1.0))
        error = {"code": code, "message": "m"}
        t.feed(E("tool/result", {**base, "content": "no", "is_error": True, "error": error}, 1.3))
    calls = {i.data["call_id"]: i for i in t.items if i.kind == "tool"}
    for call_id, (_, state) in codes.items():
        item = calls[call_id]
        assert item.data["state"] == state
        shown = item_text(item)
        if call_id == "x":  # its body ran: the logged span is its duration
            assert shown == "tool f({}) [failed] (0.30s) → no"
        else:
            assert shown == f"tool f({{}}) [{state}] → no"
            assert "(0." not in item_html(item)


class _Logged:
    """A logged event stand-in: ``type``, ``data`` and ``time``."""

    def __init__(self, type: str, data: dict[str, Any], time: float = 1.0) -> None:
        self.type, self.data, self.time = type, data, time


def _chunk(chunk: StreamChunk) -> _Logged:
    logged = chunk.model_dump(mode="json", exclude_none=True)
    return _Logged("assistant/chunk", {"turn": 1, "step": 1, "chunk": logged})


def test_streamed_blocks_show_what_the_assembler_builds_from_the_same_chunks() -> None:
    chunks: list[StreamChunk] = [
        BlockStart(index=0, block_type="reasoning"),
        ReasoningDelta(index=0, text="thin"),
        ReasoningDelta(index=0, text="k"),
        # an end that carries the whole block replaces what the deltas said
        BlockEnd(index=0, block=ReasoningBlock(text="think harder", signature="sig")),
        TextDelta(index=1, text="hel"),  # no block-start: the delta opens the block
        TextDelta(index=1, text="lo"),
        # providers that repeat id and name in every delta: the first non-empty one wins
        ToolCallDelta(index=2, id="c1", name="echo", arguments_delta='{"a":'),
        ToolCallDelta(index=2, id="c1", name="echo", arguments_delta="1}"),
        BlockEnd(index=2),
    ]
    t = Transcript()
    t.feed_all([_Logged("turn/start", {"turn": 1}), *(_chunk(c) for c in chunks)])
    message, _, _ = assemble(chunks)
    streamed = [i for i in t.items if i.kind != "turn-start"]
    assert [(i.kind, i.text) for i in streamed] == [
        ("reasoning", "think harder"),
        ("assistant", "hello"),
        ("tool", '{"a":1}'),
    ]
    assert [getattr(b, "text", None) or getattr(b, "arguments", None) for b in message.content] == [
        i.text for i in streamed
    ]
    call = streamed[2]
    assert (call.data["call_id"], call.data["name"]) == ("c1", "echo")
    assert item_text(call) == 'tool echo({"a": 1}) [streaming]'
    assert [i.data.get("streaming") for i in streamed[:2]] == [False, True]


def test_a_streamed_call_is_found_by_its_id_once_its_message_is_logged() -> None:
    chunks: list[StreamChunk] = [
        ToolCallDelta(index=0, id="c7", name="echo", arguments_delta="{}"),
        BlockEnd(index=0),
    ]
    t = Transcript()
    t.feed_all([_Logged("turn/start", {"turn": 1}), *(_chunk(c) for c in chunks)])
    content = [{"type": "tool-call", "id": "c7", "name": "echo", "arguments": "{}"}]
    t.feed(
        _Logged(
            "assistant/message",
            {"turn": 1, "step": 1, "message": {"role": "assistant", "content": content}},
        )
    )
    call = t.call("c7")
    assert call is not None and call.data["state"] == "queued"
    assert t.pool == [call]


def test_a_settled_call_shows_finished_and_is_timed_to_its_settling_not_its_commit() -> None:
    t = Transcript()
    base = {"turn": 1, "step": 1, "call_id": "c1", "name": "f"}
    t.feed(_Logged("tool/call", {**base, "arguments": "{}"}, 1.0))
    assert not t.settle("unknown", 1.1, is_error=False, code=None)
    assert t.settle("c1", 1.25, is_error=False, code=None)
    call = t.call("c1")
    assert call is not None
    assert item_text(call) == "tool f({}) [done] (0.25s)"
    # committed later, in model order: the result is shown, the span still ends at settling
    t.feed(_Logged("tool/result", {**base, "content": "ok", "is_error": False}, 3.0))
    assert item_text(call) == "tool f({}) [done] (0.25s) → ok"
    assert not t.settle("c1", 4.0, is_error=False, code=None)  # already committed


def test_the_committed_result_decides_the_final_state_of_a_settled_call() -> None:
    t = Transcript()
    base = {"turn": 1, "step": 1, "call_id": "c1", "name": "f"}
    t.feed(_Logged("tool/call", {**base, "arguments": "{}"}, 1.0))
    t.settle("c1", 1.5, is_error=False, code=None)
    error = {"code": "BLOCKED", "message": "post-execute said no"}
    t.feed(_Logged("tool/result", {**base, "content": "no", "is_error": True, "error": error}, 2))
    call = t.call("c1")
    assert call is not None
    assert item_text(call) == "tool f({}) [failed] (0.50s) → no"


def test_a_call_awaiting_approval_says_so_and_its_duration_leaves_out_the_wait() -> None:
    t = Transcript()
    base = {"turn": 1, "step": 1, "call_id": "c1"}
    t.feed(_Logged("tool/call", {**base, "name": "f", "arguments": "{}"}, 100.0))
    t.feed(_Logged("tool/approval", {**base, "state": "asked", "reason": "risky"}, 100.25))
    call = t.call("c1")
    assert call is not None
    assert item_text(call) == "tool f({}) [awaiting approval]"
    html = item_html(call)
    assert "agentloop-tool-awaiting-approval" in html and ">awaiting approval<" in html
    t.feed(_Logged("tool/approval", {**base, "state": "approved"}, 160.25))  # a minute later
    assert item_text(call) == "tool f({}) [running]"
    assert t.settle("c1", 161.5, is_error=False, code=None)
    assert item_text(call) == "tool f({}) [done] (1.50s)"  # 61.5 s in all, 60 s of it waiting
    t.feed(_Logged("tool/result", {**base, "content": "ok", "is_error": False}, 162.0))
    assert item_text(call) == "tool f({}) [done] (1.50s) → ok"


def test_a_log_cut_while_a_call_awaited_approval_stops_its_clock_at_the_result() -> None:
    t = Transcript()
    base = {"turn": 1, "step": 1, "call_id": "c1"}
    t.feed(_Logged("tool/call", {**base, "name": "f", "arguments": "{}"}, 10.0))
    t.feed(_Logged("tool/approval", {**base, "state": "asked"}, 10.5))
    # crash repair answers the call; nobody ever answered the question
    error = {"code": "TOOL_OUTCOME_UNKNOWN", "message": "the kernel died"}
    t.feed(_Logged("tool/result", {**base, "content": "?", "is_error": True, "error": error}, 99))
    call = t.call("c1")
    assert call is not None
    assert item_text(call) == "tool f({}) [failed] (0.50s) → ?"


def test_a_star_between_digits_is_arithmetic_not_emphasis() -> None:
    from agentloop_nb.jupyter.fold._markdown import markdown_html

    assert markdown_html("6*7 is 42 and 12*12 is 144") == "<p>6*7 is 42 and 12*12 is 144</p>\n"
    both = markdown_html("`6*7` stays code, *this* is emphasis and 2*3 is 6")
    assert "<code>6*7</code>" in both and "<em>this</em>" in both and "2*3 is 6" in both
    fenced = markdown_html("```\nx = 6*7\n```")
    assert "x = 6*7" in fenced and "\\*" not in fenced


def test_the_offline_demo_texts_keep_every_character_when_rendered() -> None:
    import html
    import re

    from agentloop_nb.jupyter.fold._markdown import markdown_html
    from agentloop_nb.llm.offline import HELP, INTRO

    for text in (HELP, INTRO, "2+3*4 = 14", "6 × 7 is 42 and 12 × 12 is 144."):
        shown = html.unescape(re.sub(r"<[^>]+>", "", markdown_html(text))).strip()
        assert shown == text


def test_a_prompt_with_a_variable_block_shows_the_blocks_apart() -> None:
    class E:
        def __init__(self, type: str, data: dict[str, Any]) -> None:
            self.type, self.data, self.time = type, data, 1.0

    t = Transcript()
    blocks = [{"type": "text", "text": "values = array([1, 2])"}, {"type": "text", "text": "sum?"}]
    t.feed_all(
        [
            E("turn/start", {"turn": 1}),
            E("user/message", {"message": {"id": "u1", "role": "user", "content": blocks}}),
        ]
    )
    (user,) = [i for i in t.items if i.kind == "user"]
    assert item_text(user) == "[user] values = array([1, 2])\n\nsum?"
    assert "values = array([1, 2])\n\nsum?" in item_html(user)

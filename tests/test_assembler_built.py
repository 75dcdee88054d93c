"""The assembler builds its blocks and message without a validation pass when every value is
an exact ``str``: the result must be what validation makes, in every respect."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop_nb.llm import (
    BlockAssembler,
    BlockEnd,
    BlockStart,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
)
from agentloop_nb.messages import AssistantMessage, ReasoningBlock, TextBlock, ToolCallBlock


def same(fast: Any, validated: Any) -> None:
    assert type(fast) is type(validated)
    assert fast.__dict__ == validated.__dict__  # a field added later shows up here first
    assert list(fast.__dict__) == list(validated.__dict__)  # declaration order
    assert fast.model_fields_set == validated.model_fields_set
    assert fast.__pydantic_extra__ == validated.__pydantic_extra__
    assert fast.__pydantic_private__ == validated.__pydantic_private__
    assert fast == validated and hash(fast) == hash(validated)
    assert fast.model_dump(mode="json") == validated.model_dump(mode="json")
    assert repr(fast) == repr(validated)


def assembled(*chunks: Any) -> BlockAssembler:
    asm = BlockAssembler()
    for chunk in chunks:
        asm.feed(chunk)
    return asm


@pytest.mark.parametrize("arguments", ['{"a": 1}', "", "é"])
def test_a_tool_call_block_and_its_message_equal_the_validated_ones(arguments: str) -> None:
    asm = assembled(
        BlockStart(index=0, block_type="tool-call"),
        ToolCallDelta(index=0, id="c1", name="run", arguments_delta=arguments),
        BlockEnd(index=0),
    )
    block = asm.block(0)
    same(block, ToolCallBlock(id="c1", name="run", arguments=arguments))
    message = asm.message()
    same(
        message,
        AssistantMessage(content=(ToolCallBlock(id="c1", name="run", arguments=arguments),)),
    )
    assert message.content[0] is block and message.tool_calls == (block,)


def test_text_and_reasoning_blocks_and_a_mixed_message_equal_the_validated_ones() -> None:
    carried = TextBlock(text="carried")
    asm = assembled(
        ReasoningDelta(index=0, text="think"),
        ReasoningDelta(index=0, text="ing"),
        TextDelta(index=1, text="hello"),
        BlockStart(index=2, block_type="text"),
        BlockEnd(index=2, block=carried),
        ToolCallDelta(index=3, id="c2", name="n", arguments_delta="{}"),
        BlockEnd(index=3),
    )
    message = asm.message()
    expected = AssistantMessage(
        content=(
            ReasoningBlock(text="thinking"),
            TextBlock(text="hello"),
            carried,
            ToolCallBlock(id="c2", name="n", arguments="{}"),
        )
    )
    same(message, expected)
    for fast, validated in zip(message.content, expected.content, strict=True):
        same(fast, validated)
    assert message.content[2] is carried
    same(assembled().message(), AssistantMessage(content=()))


def test_a_copy_with_changes_leaves_other_blocks_field_sets_alone() -> None:
    first = assembled(ToolCallDelta(index=0, id="a", name="n"), BlockEnd(index=0)).message()
    second = assembled(ToolCallDelta(index=0, id="b", name="n"), BlockEnd(index=0)).message()
    changed = first.tool_calls[0].model_copy(update={"type": "tool-call"})
    assert changed.model_fields_set == {"id", "name", "arguments", "type"}
    assert second.tool_calls[0].model_fields_set == {"id", "name", "arguments"}
    copied = first.model_copy(update={"role": "assistant"})
    assert copied.model_fields_set == {"content", "role"}
    assert second.model_fields_set == {"content"}


def test_a_str_subclass_id_and_a_block_subclass_are_validated_as_before() -> None:
    class Name(str):
        pass

    class Marked(TextBlock):
        pass

    asm = BlockAssembler()
    asm.feed(ToolCallDelta.model_construct(index=0, id=Name("c1"), name="n", arguments_delta=""))
    asm.feed(BlockEnd(index=0))
    same(asm.block(0), ToolCallBlock(id=Name("c1"), name="n", arguments=""))
    marked = Marked(text="m")
    message = assembled(
        BlockStart(index=0, block_type="text"), BlockEnd(index=0, block=marked)
    ).message()
    same(message, AssistantMessage(content=(marked,)))

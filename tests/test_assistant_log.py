"""An assembled assistant message logged from its fields (``session/_assistant_log.py``): the
logged data is exactly the frozen ``model_dump(mode="json")`` and the node the session derives
is exactly what parsing that dump gives, or the fast path declines."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentloop_nb.llm import BlockAssembler, BlockEnd, TextDelta
from agentloop_nb.messages import (
    AssistantMessage,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolCallBlock,
)
from agentloop_nb.session import SessionStore, freeze_json
from agentloop_nb.session._assistant_log import logged_message
from agentloop_nb.session._session import parse_node


def _state(model: Any) -> Any:
    """Everything a model instance holds, blocks included (``__getstate__`` compares the field
    values, the set of fields counted as set, extra and private values)."""
    state = dict(model.__getstate__())
    if "content" in state["__dict__"]:
        state["__dict__"] = {
            **state["__dict__"],
            "content": [_state(b) for b in state["__dict__"]["content"]],
        }
    return state


def _as_validated(message: AssistantMessage) -> tuple[Any, Any]:
    """What the dump-and-parse path logs and derives."""
    data = freeze_json(message.model_dump(mode="json"), label="message")
    return data, parse_node("assistant/message", {"message": data}, 0)  # type: ignore[arg-type]


MESSAGES = {
    "tool call": AssistantMessage(content=(ToolCallBlock(id="c1", name="noop", arguments="{}"),)),
    "text": AssistantMessage(content=(TextBlock(text="hello \ud83d"),)),
    "reasoning without signature": AssistantMessage(content=(ReasoningBlock(text="hm"),)),
    "reasoning with signature": AssistantMessage(
        content=(ReasoningBlock(text="hm", signature="sig"), TextBlock(text="a"))
    ),
    "image": AssistantMessage(content=(ImageBlock(media_type="image/png", data="AAA="),)),
    "mixed": AssistantMessage(
        content=(
            ReasoningBlock(text="r"),
            TextBlock(text="t"),
            ToolCallBlock(id="a", name="x", arguments='{"k": 1}'),
            ToolCallBlock(id="b", name="y"),
        )
    ),
    "empty": AssistantMessage(),
    "validated from JSON": AssistantMessage.model_validate(
        {"role": "assistant", "content": [{"type": "text", "text": "v"}]}
    ),
}


@pytest.mark.parametrize("name", list(MESSAGES))
def test_the_logged_dump_and_node_are_those_of_the_dump_and_parse_path(name: str) -> None:
    message = MESSAGES[name]
    logged = logged_message(message)
    assert logged is not None
    data, node = logged
    expected_data, expected_node = _as_validated(message)
    assert data == expected_data
    # Same keys in the same order at every level: the log's bytes are the same.
    assert json.dumps(data) == json.dumps(expected_data)
    assert type(data) is type(expected_data)
    assert [type(b) for b in data["content"]] == [type(b) for b in expected_data["content"]]
    if expected_node is None:
        assert node is None
    else:
        assert node == expected_node
        assert _state(node) == _state(expected_node)
        assert node.model_fields_set == expected_node.model_fields_set
        assert node.model_dump(exclude_unset=True) == expected_node.model_dump(exclude_unset=True)
        assert node is not message  # the loop's own message is left as it was


def test_the_assembled_message_of_a_stream_is_logged_from_its_fields() -> None:
    asm = BlockAssembler()
    asm.feed(TextDelta(index=0, text="he"))
    asm.feed(TextDelta(index=0, text="y"))
    asm.feed(BlockEnd(index=1, block=ReasoningBlock(text="r", signature="s")))
    message = asm.message()
    logged = logged_message(message)
    assert logged is not None
    assert (logged[0], _state(logged[1])) == (
        _as_validated(message)[0],
        _state(_as_validated(message)[1]),
    )


class _SubBlock(TextBlock):
    pass


class _Text(str):
    pass


DECLINED = {
    "a block subclass": AssistantMessage(content=(_SubBlock(text="x"),)),
    "a str subclass value": AssistantMessage.model_construct(
        content=(TextBlock.model_construct(text=_Text("x")),)
    ),
    "a value of another type": AssistantMessage.model_construct(
        content=(TextBlock.model_construct(text=3),)
    ),
    "a None where None is not valid": AssistantMessage.model_construct(
        content=(ToolCallBlock.model_construct(id=None, name="n"),)
    ),
    "a wrong type literal": AssistantMessage.model_construct(
        content=(TextBlock.model_construct(type="image", text="x"),)
    ),
    "a missing field": AssistantMessage.model_construct(
        content=(ToolCallBlock.model_construct(name="n"),)
    ),
    "a list as content": AssistantMessage.model_construct(content=[TextBlock(text="x")]),
    "not an assistant message": TextBlock(text="x"),
}


@pytest.mark.parametrize("name", list(DECLINED))
def test_anything_the_fields_alone_do_not_fix_is_declined(name: str) -> None:
    assert logged_message(DECLINED[name]) is None


def test_a_session_derives_the_given_node_and_a_reload_derives_an_equal_one() -> None:
    store = SessionStore()
    session = store.create("s")
    message = MESSAGES["mixed"]
    data, node = logged_message(message)  # type: ignore[misc]
    session.append("assistant/message", {"turn": 1, "step": 1, "message": data}, _node=node)
    derived = session.derive_messages()
    assert derived == [node] and derived[0] is node
    # A session built from the same events (what a reload does) parses the logged data.
    other = store.create("t")
    other.adopt_durable(list(session.events))
    assert _state(other.derive_messages()[0]) == _state(node)


def test_a_block_already_frozen_by_the_chunk_log_is_shared_when_it_holds_every_field() -> None:
    # ``dumps`` pairs (block, frozen fields) from the chunk log's ``block-end``s: the dump
    # shares the frozen value of the same block object when nothing was left out of it, and
    # the logged data is the same as without it in every case.
    from agentloop_nb.session import FrozenDict
    from agentloop_nb.session._frozen import freeze_fields

    call = ToolCallBlock(id="a", name="x", arguments="{}")
    other = ToolCallBlock(id="a", name="x", arguments="{}")  # equal, another object
    bare = ReasoningBlock(text="r")  # its frozen fields leave ``signature: None`` out
    message = AssistantMessage(content=(bare, call, other))
    frozen = {id(b): freeze_fields(b.__dict__) for b in (call, other, bare)}
    plain = logged_message(message)
    assert plain is not None
    for dumps in (
        [(call, frozen[id(call)]), (other, frozen[id(other)])],
        [(bare, frozen[id(bare)]), (call, frozen[id(call)])],
        [(other, frozen[id(other)])],  # not in content order from ``call`` on: still correct
        [(call, frozen[id(other)]), (other, frozen[id(call)])],
    ):
        logged = logged_message(message, dumps)
        assert logged is not None
        assert logged[0] == plain[0] and _state(logged[1]) == _state(plain[1])
        content = logged[0]["content"]
        assert all(type(b) is FrozenDict for b in content)
        assert content[0] is not frozen[id(bare)]  # ``signature: None`` must be in the dump
        for block, value in dumps:
            if block is call:
                assert content[1] is value
    shared = logged_message(message, [(call, frozen[id(call)]), (other, frozen[id(other)])])
    assert shared is not None and shared[0]["content"][2] is frozen[id(other)]

"""A user message logged from its fields (``session/_user_log.py``): the logged data is
exactly the frozen ``model_dump(mode="json")``, the node the session derives is exactly what
parsing that dump gives, and a message built from a ``str`` is exactly what validation builds;
or the fast path declines."""

from __future__ import annotations

import re
from typing import Any

import pytest

from agentloop_nb.loop._inbox import make_user_message, new_message_id
from agentloop_nb.messages import ImageBlock, ReasoningBlock, TextBlock, ToolCallBlock, UserMessage
from agentloop_nb.session import freeze_json
from agentloop_nb.session._nodes import parse_node
from agentloop_nb.session._user_log import logged_user, user_dump, user_text_message


def _state(model: Any) -> Any:
    """Everything a model instance holds, blocks included (field values, the set of fields
    counted as set, extra and private values)."""
    state = dict(model.__getstate__())
    if "content" in state["__dict__"]:
        state["__dict__"] = {
            **state["__dict__"],
            "content": [_state(b) for b in state["__dict__"]["content"]],
        }
        state["__dict__"]["source_type"] = type(state["__dict__"].get("source"))
    return state


def _as_validated(message: UserMessage) -> tuple[Any, Any]:
    """What the dump-and-parse path logs and derives."""
    data = freeze_json(message.model_dump(mode="json"), label="message")
    return data, parse_node("user/message", {"message": data}, 0)  # type: ignore[arg-type]


MESSAGES = {
    "text": UserMessage(id="m1", content=(TextBlock(text="hello \ud83d"),)),
    "several blocks": UserMessage(
        id="m2",
        content=(
            TextBlock(text="a"),
            ImageBlock(media_type="image/png", data="AAA="),
            ReasoningBlock(text="r"),
            ReasoningBlock(text="r", signature="s"),
            ToolCallBlock(id="c", name="n"),
        ),
    ),
    "no content": UserMessage(id="m3", content=()),
    "tool-context source": UserMessage(
        id="m4",
        content=(TextBlock(text="x"),),
        source={"kind": "tool-context", "call_id": "c1", "tool": "t", "n": 3, "b": True, "z": None},
    ),
    "validated from JSON": UserMessage.model_validate(
        {"role": "user", "id": "m5", "content": [{"type": "text", "text": "t"}]}
    ),
    "built from a str": make_user_message("go", None),
    "built from a str, source": make_user_message("go", {"kind": "steer", "k": 1}),
}


@pytest.mark.parametrize("name", MESSAGES)
def test_logged_user_is_the_frozen_dump_and_the_parsed_node(name: str) -> None:
    message = MESSAGES[name]
    logged = logged_user(message)
    assert logged is not None
    data, node = _as_validated(message)
    assert logged[0] == data
    assert _types(logged[0]) == _types(data)  # frozen the same way, tuples where tuples
    assert _state(logged[1]) == _state(node)
    assert logged[1] is not message  # the loop's own message keeps its fields-set
    dump = user_dump(message)
    assert dump == data
    assert _types(dump) == _types(data)


def _types(value: Any) -> Any:
    if isinstance(value, dict):
        return (type(value), {k: _types(v) for k, v in value.items()})
    if isinstance(value, tuple | list):
        return (type(value), [_types(v) for v in value])
    return type(value)


class _Sub(UserMessage):
    pass


class _SubBlock(TextBlock):
    pass


DECLINED = {
    "a subclass": _Sub(id="s", content=()),
    "a block subclass": UserMessage(id="s", content=(_SubBlock(text="x"),)),
    "a nested source": UserMessage(id="s", content=(), source={"kind": "k", "meta": {"a": 1}}),
    "a float in the source": UserMessage(id="s", content=(), source={"kind": "k", "x": 1.5}),
    "a list in the source": UserMessage(id="s", content=(), source={"kind": "k", "x": [1]}),
    "an id that is not a str": UserMessage.model_construct(id=1, content=()),
    "content in a list": UserMessage.model_construct(id="s", content=[TextBlock(text="x")]),
}


@pytest.mark.parametrize("name", DECLINED)
def test_logged_user_declines_what_its_fields_do_not_fix(name: str) -> None:
    assert logged_user(DECLINED[name]) is None
    assert user_dump(DECLINED[name]) is None


def test_a_message_from_a_str_is_what_validation_builds() -> None:
    built = user_text_message("msg-1", "hi", {"kind": "user"})
    validated = UserMessage(id="msg-1", content=(TextBlock(text="hi"),), source={"kind": "user"})
    assert _state(built) == _state(validated)
    assert built.model_fields_set == validated.model_fields_set
    assert built.content[0].model_fields_set == validated.content[0].model_fields_set
    with pytest.raises(Exception, match="frozen"):
        built.id = "other"  # type: ignore[misc]


def test_a_str_subclass_still_takes_the_validated_path() -> None:
    class Text(str):
        pass

    message = make_user_message(Text("hi"), None)
    assert type(message.content[0].text) is str
    assert message.content[0].text == "hi"


def test_message_ids_keep_the_uuid4_shape() -> None:
    ids = {new_message_id() for _ in range(200)}
    assert len(ids) == 200
    for value in ids:
        assert re.fullmatch(r"msg-[0-9a-f]{12}4[0-9a-f]{3}", value)


@pytest.mark.anyio
async def test_the_inbox_and_the_step_log_what_the_dump_path_logs() -> None:
    from agentloop_nb.app import App
    from agentloop_nb.loop import AgentOptions
    from agentloop_nb.testing import text

    class Replay:
        async def stream(self, options: Any) -> Any:
            for chunk in text("done"):
                yield chunk

    app = App(None)
    app.ctx.llm.register_adapter(["replay"], Replay())
    agent = app.ctx.agent_loop.create("a", AgentOptions(provider="replay", model="m"))
    sent = agent.followup("go", source={"kind": "user", "n": 2})
    await agent.when_idle()
    events = agent.session.events
    spliced = [e for e in events if e.type == "agent/inbox/spliced"]
    assert [e.data for e in spliced] == [
        freeze_json(
            {
                "target": "next-turn",
                "start": 0,
                "removed_count": 0,
                "inserted": [sent.model_dump(mode="json")],
            },
            label="x",
        ),
        freeze_json(
            {"target": "next-turn", "start": 0, "removed_count": 1, "inserted": []}, label="x"
        ),
    ]
    (entered,) = [e for e in events if e.type == "user/message"]
    assert entered.data == freeze_json({"message": sent.model_dump(mode="json")}, label="x")
    (node,) = [m for m in agent.session.derive_messages() if m.role == "user"]
    assert _state(node) == _state(_as_validated(sent)[1])
    await app.aclose()

"""The inbox: send × wakeup, splice events, claim rules, edits."""

from __future__ import annotations

from typing import Any

import pytest
from _loop_helpers import (
    OPTIONS,
    data,
    idle,
    new_agent,
    register,
    run,
    scripted,
    types,
    user_texts,
)

from agentloop_nb.app import App
from agentloop_nb.loop import Reject
from agentloop_nb.messages import TextBlock, UserMessage
from agentloop_nb.testing import text, tool_call
from agentloop_nb.tools import ToolExecution, tool

pytestmark = pytest.mark.anyio


def notifications(app: App) -> list[tuple[str, str, Any]]:
    """(event, message text, turn or None) for every inbox notification."""
    seen: list[tuple[str, str, Any]] = []
    for name in ("agent/inbox/inserted", "agent/inbox/claimed", "agent/inbox/discarded"):
        app.ctx.on(
            name,
            lambda p, name=name: seen.append(
                (name.rsplit("/", 1)[1], p.message.text, getattr(p, "turn", None))
            ),
        )
    return seen


@pytest.mark.parametrize("target", ["next-turn", "next-step"])
@pytest.mark.parametrize("wakeup", [True, False])
async def test_send_routes_by_target_and_wakes_only_when_asked(
    app: App, target: str, wakeup: bool
) -> None:
    agent, model = new_agent(app, text("ok"))
    message = agent.send("hello", target=target, wakeup=wakeup)  # type: ignore[arg-type]
    assert agent.status == ("running" if wakeup else "idle")  # flips synchronously
    pending = agent.inbox.next_turn if target == "next-turn" else agent.inbox.next_step
    assert pending == (message,)
    await idle(agent)
    if wakeup:
        assert user_texts(agent) == ["hello"] and len(model.requests) == 1
        assert agent.inbox.next_turn == () and agent.inbox.next_step == ()
    else:
        assert types(agent) == ["agent/inbox/spliced"] and model.requests == []


async def test_followup_steer_and_inject_are_send_presets(app: App) -> None:
    agent, _ = new_agent(app)
    agent.inject("i")
    assert agent.status == "idle" and [m.text for m in agent.inbox.next_step] == ["i"]
    agent.steer("s")
    assert agent.status == "running"
    agent.followup("f")
    assert [m.text for m in agent.inbox.next_step] == ["i", "s"]
    assert [m.text for m in agent.inbox.next_turn] == ["f"]
    assert [d["target"] for d in data(agent, "agent/inbox/spliced")] == [
        "next-step",
        "next-step",
        "next-turn",
    ]
    agent.cancel()
    await idle(agent)


async def test_send_logs_one_durable_splice_before_emitting_inserted(app: App) -> None:
    agent, _ = new_agent(app)
    seen: list[Any] = []
    app.ctx.on(
        "agent/inbox/inserted",
        lambda p: seen.append(
            (p.message, agent.session.events[-1].type, len(agent.session.events))
        ),
    )
    agent.inject("one")
    m2 = agent.inject("two", source={"kind": "widget", "cell": 3})
    splices = data(agent, "agent/inbox/spliced")
    assert [dict(d) for d in splices][1] == {
        "target": "next-step",
        "start": 1,
        "removed_count": 0,
        "inserted": (
            {
                "role": "user",
                "id": m2.id,
                "content": ({"type": "text", "text": "two"},),
                "source": {"kind": "widget", "cell": 3},
            },
        ),
    }
    assert [(m.text, t, n) for m, t, n in seen] == [
        ("one", "agent/inbox/spliced", 1),
        ("two", "agent/inbox/spliced", 2),
    ]


async def test_source_defaults_to_user_and_steer_and_inject_label_themselves(app: App) -> None:
    agent, _ = new_agent(app)
    assert agent.send("x", wakeup=False).source == {"kind": "user"}
    assert agent.inject("y").source == {"kind": "inject"}
    assert agent.inject("z", source="widget").source == {"kind": "widget"}


async def test_turn_boundary_claims_all_next_step_input_then_one_next_turn_prompt(
    app: App,
) -> None:
    agent, model = new_agent(app, text("r1"), text("r2"))
    seen = notifications(app)
    agent.inject("i1")
    agent.inject("i2")
    agent.send("f1", wakeup=False)
    agent.followup("f2")
    await idle(agent)
    assert user_texts(agent, 1) == ["i1", "i2", "f1"]
    assert user_texts(agent, 2) == ["f2"]
    assert [x for x in seen if x[0] == "claimed"] == [
        ("claimed", "i1", 1),
        ("claimed", "i2", 1),
        ("claimed", "f1", 1),
        ("claimed", "f2", 2),
    ]
    # turn/start first, then one pure-deletion splice per list (no outcome), next-step first
    kinds = types(agent)
    first = kinds.index("turn/start")
    claims = [dict(d) for d in data(agent, "agent/inbox/spliced") if d["removed_count"]]
    assert kinds[first + 1 : first + 3] == ["agent/inbox/spliced"] * 2
    assert claims[:2] == [
        {"target": "next-step", "start": 0, "removed_count": 2, "inserted": ()},
        {"target": "next-turn", "start": 0, "removed_count": 1, "inserted": ()},
    ]
    assert request_users(model, 0) == ["i1", "i2", "f1"]


def request_users(model: Any, i: int) -> list[str]:
    return [m.text for m in model.requests[i].messages if m.role == "user"]


async def test_between_steps_only_next_step_input_is_claimed(app: App) -> None:
    @tool
    def nudge(execution: ToolExecution) -> str:
        """Queue input while the turn runs."""
        execution.agent.followup("later")
        execution.agent.steer("now")
        return "ok"

    register(app, nudge)
    agent, _ = new_agent(app, tool_call("c1", "nudge", {}), text("step2"), text("turn2"))
    await run(agent, "start")
    assert user_texts(agent, 1) == ["start", "now"]
    assert user_texts(agent, 2) == ["later"]
    assert data(agent, "step/start")[1] == {"turn": 1, "step": 2}
    assert reasons(agent) == ["completed", "completed"]


def reasons(agent: Any) -> list[str]:
    return [d["reason"]["kind"] for d in data(agent, "turn/end")]


async def test_steering_claimed_within_the_turn_does_not_open_an_empty_turn(app: App) -> None:
    agent, model = new_agent(app, text("one"), text("two"))
    steered: list[bool] = []

    def on_event(p: Any) -> None:
        if p.event.type == "step/start" and not steered:
            steered.append(agent.steer("mid") is not None)

    app.ctx.on("session/event", on_event)
    await run(agent)
    assert types(agent).count("turn/start") == 1
    assert user_texts(agent) == ["hi", "mid"] and len(model.requests) == 2


async def test_inject_never_wakes_and_waits_for_the_next_turn(app: App) -> None:
    agent, model = new_agent(app, text("ok"))
    agent.inject("context")
    await idle(agent)
    assert agent.status == "idle" and model.requests == []
    await run(agent, "question")
    assert user_texts(agent, 1) == ["context", "question"]


async def test_inject_during_a_tool_step_enters_the_next_step(app: App) -> None:
    @tool
    def add_context(execution: ToolExecution) -> str:
        """Inject context while running."""
        execution.agent.inject("fyi")
        return "ok"

    register(app, add_context)
    agent, model = new_agent(app, tool_call("c1", "add_context", {}), text("done"))
    await run(agent)
    assert user_texts(agent) == ["hi", "fyi"]
    assert request_users(model, 1) == ["hi", "fyi"]


async def test_inbox_remove_logs_a_canceled_splice_and_emits_discarded(app: App) -> None:
    agent, _ = new_agent(app)
    seen = notifications(app)
    keep = agent.inject("keep")
    drop = agent.inject("drop")
    removed = agent.inbox.remove(drop.id)
    assert removed == drop and agent.inbox.next_step == (keep,)
    assert dict(data(agent, "agent/inbox/spliced")[-1]) == {
        "target": "next-step",
        "start": 1,
        "removed_count": 1,
        "inserted": (),
        "outcome": "canceled",
    }
    assert seen[-1] == ("discarded", "drop", None)
    with pytest.raises(KeyError, match=drop.id):
        agent.inbox.remove(drop.id)


async def test_inbox_replace_keeps_id_place_and_source(app: App) -> None:
    agent, _ = new_agent(app, text("ok"))
    seen = notifications(app)
    agent.send("first", wakeup=False)
    old = agent.send("typo", wakeup=False, source="widget")
    agent.send("last", wakeup=False)
    new = agent.inbox.replace(old.id, "fixed")
    assert (new.id, new.source, new.text) == (old.id, {"kind": "widget"}, "fixed")
    assert [m.text for m in agent.inbox.next_turn] == ["first", "fixed", "last"]
    last = dict(data(agent, "agent/inbox/spliced")[-1])
    assert (last["start"], last["removed_count"], last["outcome"]) == (1, 1, "canceled")
    assert last["inserted"][0]["content"][0]["text"] == "fixed"
    assert seen[-2:] == [("discarded", "typo", None), ("inserted", "fixed", None)]


async def test_message_ids_stay_unique_across_both_lists(app: App) -> None:
    agent, _ = new_agent(app)
    message = UserMessage(id="same", content=(TextBlock(text="x"),))
    a = agent.send(message, wakeup=False)
    b = agent.send(message, target="next-step", wakeup=False)
    assert a.id == "same" and b.id != "same"


@pytest.mark.parametrize("content", [[object()], 42, [{"type": "nope"}]])
async def test_content_that_is_not_message_content_raises_before_logging(
    app: App, content: Any
) -> None:
    agent, _ = new_agent(app)
    with pytest.raises(TypeError, match="content"):
        agent.followup(content)
    assert types(agent) == [] and agent.status == "idle"


async def test_source_that_is_not_json_raises_before_logging(app: App) -> None:
    agent, _ = new_agent(app)
    with pytest.raises(TypeError, match="source"):
        agent.followup("x", source={"kind": "user", "bad": object()})
    with pytest.raises(ValueError, match="target"):
        agent.send("x", target="later")  # type: ignore[arg-type]
    assert types(agent) == []


async def test_blocks_and_user_messages_are_accepted_as_content(app: App) -> None:
    agent, model = new_agent(app, text("ok"))
    await run(agent, [TextBlock(text="as blocks")])
    assert request_users(model, 0) == ["as blocks"]


async def test_claimed_input_is_logged_as_user_messages_of_the_step(app: App) -> None:
    agent = app.ctx.agent_loop.create("a", OPTIONS)
    model = scripted(app, text("ok"))
    sent = agent.followup("hello", source="cell")
    await idle(agent)
    (logged,) = data(agent, "user/message")
    assert logged["message"]["id"] == sent.id and logged["message"]["source"] == {"kind": "cell"}
    assert model.requests[0].messages[0] == sent


async def test_a_wake_while_idle_opens_a_turn_even_when_its_message_was_removed(
    app: App,
) -> None:
    agent, model = new_agent(app)
    statuses: list[str] = []
    app.ctx.on("agent/status", lambda p: statuses.append(p.status))
    message = agent.followup("never mind")
    agent.inbox.remove(message.id)
    await idle(agent)
    assert statuses == ["running", "idle"]
    assert [d["reason"]["kind"] for d in data(agent, "turn/end")] == ["completed"]
    assert "step/start" not in types(agent) and model.requests == []


async def test_input_inserted_after_a_rejected_claim_stays_pending(app: App) -> None:
    agent, model = new_agent(app)

    async def reject(payload: Any, next: Any) -> Any:
        payload.agent.inject("arrived during pre-step")
        return Reject()

    app.ctx.on("agent/pre-step", reject)
    await run(agent, "rejected prompt")
    assert [d["reason"]["kind"] for d in data(agent, "turn/end")] == ["rejected"]
    assert [m.text for m in agent.inbox.next_step] == ["arrived during pre-step"]
    assert model.requests == []

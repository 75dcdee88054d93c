from __future__ import annotations

from typing import Any

import pytest

from agentloop_nb.messages import AssistantMessage, ToolResultMessage
from agentloop_nb.session import TOOL_OUTCOME_UNKNOWN, Session, SessionStore, repair

UNKNOWN = "Error: tool outcome unknown (the session ended before the tool finished)"


@pytest.fixture
def session() -> Session:
    return SessionStore().create("r")


def open_step(session: Session, turn: int = 1, step: int = 1) -> None:
    session.append("turn/start", {"turn": turn})
    session.append("step/start", {"turn": turn, "step": step})
    session.append(
        "user/message",
        {
            "message": {
                "id": f"u{turn}",
                "role": "user",
                "content": [{"type": "text", "text": "go"}],
            }
        },
    )


def call_message(turn: int, step: int, *ids: str) -> dict[str, Any]:
    blocks = [{"type": "tool-call", "id": i, "name": "echo", "arguments": "{}"} for i in ids]
    return {"turn": turn, "step": step, "message": {"role": "assistant", "content": blocks}}


def test_a_tool_call_without_result_gets_an_outcome_unknown_error(session: Session) -> None:
    open_step(session)
    session.append("assistant/message", call_message(1, 1, "c1", "c2"))
    session.append("tool/call", {"turn": 1, "step": 1, "call_id": "c1", "name": "echo"})
    session.append("tool/call", {"turn": 1, "step": 1, "call_id": "c2", "name": "echo"})
    session.append(
        "tool/result",
        {"turn": 1, "step": 1, "call_id": "c1", "content": "ok", "is_error": False},
    )
    added = repair(session)
    assert [e.type for e in added] == ["tool/result", "step/end", "turn/end"]
    result = added[0].data
    assert result["call_id"] == "c2" and result["name"] == "echo"
    assert result["turn"] == 1 and result["step"] == 1
    assert result["content"] == UNKNOWN and result["is_error"] is True
    assert result["error"]["code"] == TOOL_OUTCOME_UNKNOWN == "TOOL_OUTCOME_UNKNOWN"
    assert added[1].data == {"turn": 1, "step": 1}
    assert added[2].data == {"turn": 1, "reason": {"kind": "interrupted"}}


def test_an_undispatched_assistant_tool_call_gets_a_synthetic_call_and_result(
    session: Session,
) -> None:
    open_step(session)
    session.append("assistant/message", call_message(1, 1, "a", "b"))  # crash before dispatch
    added = repair(session)
    assert [(e.type, e.data["call_id"]) for e in added[:4]] == [
        ("tool/call", "a"),
        ("tool/result", "a"),
        ("tool/call", "b"),
        ("tool/result", "b"),
    ]
    assert added[0].data["arguments"] == "{}" and added[0].data["name"] == "echo"
    messages = session.derive_messages()
    assert isinstance(messages[1], AssistantMessage)
    assert [m.call_id for m in messages if isinstance(m, ToolResultMessage)] == ["a", "b"]
    assert all(m.is_error for m in messages if isinstance(m, ToolResultMessage))


def test_an_open_step_and_turn_are_closed_in_order(session: Session) -> None:
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append("step/end", {"turn": 1, "step": 1})
    session.append("step/start", {"turn": 1, "step": 2})
    added = repair(session)
    assert [(e.type, dict(e.data)) for e in added] == [
        ("step/end", {"turn": 1, "step": 2}),
        ("turn/end", {"turn": 1, "reason": {"kind": "interrupted"}}),
    ]


def test_a_complete_session_needs_no_repair_and_repair_is_idempotent(session: Session) -> None:
    open_step(session)
    session.append("assistant/message", call_message(1, 1, "c"))
    session.append("tool/call", {"turn": 1, "step": 1, "call_id": "c", "name": "echo"})
    session.append("tool/result", {"turn": 1, "step": 1, "call_id": "c", "content": "ok"})
    session.append("step/end", {"turn": 1, "step": 1})
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    assert repair(session) == []
    session.append("turn/start", {"turn": 2})
    assert len(repair(session)) == 1
    size = len(session.events)
    assert repair(session) == []
    assert len(session.events) == size


def test_repair_works_on_a_prepared_session_before_it_is_published() -> None:
    store = SessionStore()
    prepared = store.prepare("p", seed=[("turn/start", {"turn": 3})])
    assert [e.type for e in repair(prepared)] == ["turn/end"]
    assert prepared.events[-1].data["turn"] == 3
    assert prepared.state == "prepared"


def test_a_detached_session_cannot_be_repaired() -> None:
    store = SessionStore()
    session = store.create("d", seed=[("turn/start", {"turn": 1})])
    store.detach(session)
    with pytest.raises(RuntimeError, match="detached"):
        repair(session)


def test_a_second_call_reusing_an_id_is_repaired_by_occurrence(session: Session) -> None:
    open_step(session)
    session.append("assistant/message", call_message(1, 1, "dup"))
    session.append("tool/call", {"turn": 1, "step": 1, "call_id": "dup", "name": "echo"})
    session.append(
        "tool/result",
        {"turn": 1, "step": 1, "call_id": "dup", "content": "ok", "is_error": False},
    )
    session.append("step/end", {"turn": 1, "step": 1})
    session.append("step/start", {"turn": 1, "step": 2})
    session.append("assistant/message", call_message(1, 2, "dup"))
    session.append("tool/call", {"turn": 1, "step": 2, "call_id": "dup", "name": "echo"})
    added = repair(session)
    assert [e.type for e in added] == ["tool/result", "step/end", "turn/end"]
    assert added[0].data["call_id"] == "dup" and added[0].data["step"] == 2
    assert repair(session) == []
    results = [m for m in session.derive_messages() if isinstance(m, ToolResultMessage)]
    assert [r.content for r in results] == ["ok", UNKNOWN]


def test_duplicate_and_empty_ids_in_one_message_each_get_a_result(
    session: Session, caplog: pytest.LogCaptureFixture
) -> None:
    open_step(session)
    session.append("assistant/message", call_message(1, 1, "x", "x", ""))
    session.append("tool/call", {"turn": 1, "step": 1, "call_id": "x", "name": "echo"})
    session.append(
        "tool/result",
        {"turn": 1, "step": 1, "call_id": "x", "content": "ok", "is_error": False},
    )
    added = repair(session)
    kinds = [(e.type, e.data.get("call_id")) for e in added]
    assert kinds == [
        ("tool/call", "x"),
        ("tool/result", "x"),
        ("tool/call", ""),
        ("tool/result", ""),
        ("step/end", None),
        ("turn/end", None),
    ]
    assert "'x' is reused" in caplog.text and "'' is empty" in caplog.text
    assert repair(session) == []

"""Hook payloads are frozen values: what a frozen dataclass gave them, they keep as records."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from agentloop_nb._record import Record, set_field
from agentloop_nb.errors import InvalidTypeError
from agentloop_nb.hooks import ErrorPayload, RequestErrorPayload, StatusPayload
from agentloop_nb.llm import ErrorFinish


def test_a_payload_refuses_assignment_and_deletion_like_a_frozen_dataclass() -> None:
    payload = StatusPayload("agent", "idle")
    with pytest.raises(dataclasses.FrozenInstanceError, match="status"):
        payload.status = "running"  # type: ignore[misc]
    with pytest.raises(AttributeError, match="agent"):
        del payload.agent  # type: ignore[misc]
    with pytest.raises(AttributeError):
        payload.extra = 1  # type: ignore[attr-defined]
    assert payload.status == "idle"


def test_payloads_compare_hash_and_show_by_their_fields_in_order() -> None:
    a = StatusPayload("agent", "idle")
    assert a == StatusPayload(agent="agent", status="idle")
    assert a != StatusPayload("agent", "running")
    assert hash(a) == hash(StatusPayload("agent", "idle"))
    assert repr(a) == "StatusPayload(agent='agent', status='idle')"
    error = ValueError("x")
    assert ErrorPayload("a", 1, 2, error) != StatusPayload("a", "idle")
    assert repr(ErrorPayload("a", 1, 2, error)) == (
        "ErrorPayload(agent='a', turn=1, step=2, error=ValueError('x'))"
    )


def test_keyword_defaults_match_and_copies_rebuild_a_payload() -> None:
    failure = ErrorFinish(code="RATE_LIMIT", message="slow down")
    payload = RequestErrorPayload("a", 1, 2, failure, None)  # type: ignore[arg-type]
    assert (payload.attempt, payload.policy, payload.facts) == (1, None, None)
    match payload:
        case RequestErrorPayload(agent, turn, step, found):
            assert (agent, turn, step, found) == ("a", 1, 2, failure)
        case _:
            raise AssertionError("positional match failed")
    assert copy.copy(payload) == payload
    assert pickle.loads(pickle.dumps(payload)) == payload


def test_a_record_whose_match_args_miss_a_slot_is_refused_at_definition() -> None:
    with pytest.raises(InvalidTypeError, match="__match_args__"):

        class Broken(Record):
            __slots__ = ("a", "b")
            __match_args__ = ("a",)

            def __init__(self, a: int) -> None:
                set_field(self, "a", a)


def test_every_hook_payload_record_has_resolvable_type_hints() -> None:
    import typing

    from agentloop_nb.hooks import HOOKS

    records = {s.payload for s in HOOKS.values() if issubclass(s.payload, Record)}
    assert len(records) >= 15
    for payload in records:  # what typing, pydantic and docs tools evaluate
        hints = typing.get_type_hints(payload)
        assert set(payload.__match_args__) <= set(hints), payload

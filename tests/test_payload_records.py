"""Hook payloads are frozen values: what a frozen dataclass gave them, they keep as records.
Mutable records keep what a mutable slotted dataclass gave: equality, unhashability, repr."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from agentloop_nb._record import MutableRecord, Record, set_field
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


class _Job(MutableRecord):
    __slots__ = ("name", "secret", "steps")
    __match_args__ = ("name", "steps", "secret")
    _repr_hidden = ("secret",)

    def __init__(self, name: str, steps: list[int], secret: str = "") -> None:
        self.name = name
        self.steps = steps
        self.secret = secret


class _Task(MutableRecord):
    __slots__ = ("name", "steps")
    __match_args__ = ("name", "steps")

    def __init__(self, name: str, steps: list[int]) -> None:
        self.name = name
        self.steps = steps


def test_a_mutable_record_is_equal_by_its_fields_and_only_to_its_own_class() -> None:
    job = _Job("a", [1], "s")
    assert job == _Job("a", [1], "s")
    assert job != _Job("a", [1], "other")  # a field hidden from the repr is still compared
    assert job != _Job("a", [2], "s")
    assert _Task("a", [1]) != _Job("a", [1])  # same fields, another class
    assert _Task("a", [1]) != ("a", [1])
    job.steps.append(2)  # mutable: equality follows the fields' current values
    assert job == _Job("a", [1, 2], "s")
    job.name = "b"
    assert job != _Job("a", [1, 2], "s")


def test_a_mutable_record_is_unhashable_like_a_mutable_dataclass() -> None:
    with pytest.raises(TypeError, match="unhashable"):
        hash(_Task("a", []))
    with pytest.raises(TypeError, match="unhashable"):
        {_Job("a", [])}


def test_a_mutable_record_shows_its_fields_in_order_but_the_hidden_ones() -> None:
    assert repr(_Task("a", [1])) == "_Task(name='a', steps=[1])"
    assert repr(_Job("a", [1], "hunter2")) == "_Job(name='a', steps=[1])"
    match _Job("a", [1], "s"):
        case _Job(name, steps, secret):
            assert (name, steps, secret) == ("a", [1], "s")
        case _:
            raise AssertionError("positional match failed")


def test_a_mutable_record_whose_fields_miss_a_slot_or_hide_a_stranger_is_refused() -> None:
    with pytest.raises(InvalidTypeError, match=r"mutable record .*Broken: __match_args__"):

        class Broken(MutableRecord):
            __slots__ = ("a", "b")
            __match_args__ = ("a",)

    with pytest.raises(InvalidTypeError, match=r"mutable record .*Hides: _repr_hidden.*'c'"):

        class Hides(MutableRecord):
            __slots__ = ("a", "b")
            __match_args__ = ("a", "b")
            _repr_hidden = ("c",)

    with pytest.raises(InvalidTypeError, match="__match_args__"):

        class Open(MutableRecord):  # a __dict__ would hold fields nobody compares
            __slots__ = ("__dict__", "a")
            __match_args__ = ("a", "__dict__")


def test_every_hook_payload_record_has_resolvable_type_hints() -> None:
    import typing

    from agentloop_nb.hooks import HOOKS

    records = {s.payload for s in HOOKS.values() if issubclass(s.payload, Record)}
    assert len(records) >= 15
    for payload in records:  # what typing, pydantic and docs tools evaluate
        hints = typing.get_type_hints(payload)
        assert set(payload.__match_args__) <= set(hints), payload

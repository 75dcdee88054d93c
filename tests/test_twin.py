"""Frozen slotted instances built by a twin class (``agentloop_nb._twin``): what the twin builds
is what the frozen class's constructor builds (its exact class, every slot, still frozen), and
a twin whose slots drift from its class fails at once instead of building something else."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from agentloop_nb._twin import same_slots
from agentloop_nb.llm import GenerateOptions
from agentloop_nb.llm._options import _Options
from agentloop_nb.session import FrozenDict, SessionEvent, SessionStore
from agentloop_nb.session._events import _Event, make_event


def test_each_twin_has_exactly_its_frozen_class_slots() -> None:
    assert same_slots(_Options, GenerateOptions)
    assert same_slots(_Event, SessionEvent)


def test_a_twin_built_event_is_the_event_the_constructor_builds() -> None:
    data = FrozenDict({"turn": 1, "step": 2})
    built = make_event("step/start", 3, 12.5, data, None, (1, 2))
    expected = SessionEvent("step/start", 3, 12.5, data, None, (1, 2))
    assert type(built) is SessionEvent
    assert built == expected and built.to_dict() == expected.to_dict()
    assert built.data is data and built.source_event_seqs == (1, 2)
    assert pickle.loads(pickle.dumps(built)) == expected
    with pytest.raises(AttributeError, match="immutable"):
        built.seq = 4  # type: ignore[misc]
    default = make_event("turn/start", 0, 1.0, data)
    assert default.surface_op is None and default.source_event_seqs == ()


def test_an_appended_event_is_the_event_the_constructor_builds_slot_by_slot() -> None:
    # ``Session.append`` makes the twin's stores itself (not through ``make_event``): every
    # slot must be set as the constructor sets it, and nothing else.
    session = SessionStore().prepare("twin")
    data = FrozenDict({"turn": 1, "step": 2})
    session.append("turn/start", data, time=7.5)
    appended = session.append("step/start", data, source_event_seqs=[0], time=12.5)
    expected = SessionEvent("step/start", 1, 12.5, data, None, (0,))
    assert type(appended) is SessionEvent and appended == expected
    for name in SessionEvent.__slots__:
        assert getattr(appended, name) == getattr(expected, name), name
    assert appended.data is data
    with pytest.raises(AttributeError, match="immutable"):
        appended.seq = 4  # type: ignore[misc]
    surface = session.append(
        "user/message",
        {"message": {"role": "user", "id": "u", "content": [{"type": "text", "text": "hi"}]}},
        surface_op="append",
    )
    assert surface.surface_op == "append" and surface.source_event_seqs == ()
    assert pickle.loads(pickle.dumps(surface)) == surface


def test_twin_built_options_are_frozen_options() -> None:
    built = _Options("p", "m", (), None, (), None, None, None, None, None)
    assert type(built) is GenerateOptions and built == GenerateOptions(provider="p", model="m")
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.model = "other"  # type: ignore[misc]


def test_a_twin_that_drifts_from_its_class_fails_instead_of_building() -> None:
    class Extra:
        __slots__ = ("data", "extra", "seq", "source_event_seqs", "surface_op", "time", "type")

    class Fewer:
        __slots__ = ("data", "seq", "source_event_seqs", "surface_op", "time")

    for drifted in (Extra, Fewer):
        assert not same_slots(drifted, SessionEvent)
        instance = drifted()
        with pytest.raises(TypeError):
            instance.__class__ = SessionEvent  # the twin's store: refused across layouts

    class Guarded:
        __slots__ = ("data", "seq", "source_event_seqs", "surface_op", "time", "type")

        def __setattr__(self, name: str, value: object) -> None:
            raise AssertionError

    assert not same_slots(Guarded, SessionEvent)  # its stores would not be plain ones

from __future__ import annotations

import copy
import json
import math
import pickle
from collections.abc import Callable, Container
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from agentloop_nb.context import Context
from agentloop_nb.messages import AssistantMessage, ToolResultMessage, UserMessage
from agentloop_nb.session import (
    HEADER_VERSION,
    FrozenDict,
    Session,
    SessionEvent,
    SessionEventPayload,
    SessionHeader,
    SessionPayload,
    SessionStore,
    freeze_json,
)


class _EveryName:
    def __contains__(self, name: object) -> bool:
        return True


_EVERY_NAME = _EveryName()


class FakeBus:
    """The dispatch surface a SessionStore needs, with Context-like semantics: ``emit``
    contains listener errors, ``emit_strict`` propagates them, ``parallel`` runs listeners
    concurrently and raises an ExceptionGroup."""

    def __init__(self) -> None:
        self.listeners: dict[str, list[Callable[[Any], Any]]] = {}
        self.contained: list[BaseException] = []
        self.log: list[tuple[str, Any]] = []

    def on(self, name: str, handler: Callable[[Any], Any]) -> Callable[[], None]:
        self.listeners.setdefault(name, []).append(handler)
        return lambda: self.listeners[name].remove(handler)

    @property
    def listened(self) -> Container[str]:
        return _EVERY_NAME  # log every emit, listened to or not

    def emit(self, name: str, payload: Any) -> None:
        self.log.append((name, payload))
        for handler in tuple(self.listeners.get(name, ())):
            try:
                handler(payload)
            except Exception as exc:
                self.contained.append(exc)

    def emit_strict(self, name: str, payload: Any) -> None:
        self.log.append((name, payload))
        for handler in tuple(self.listeners.get(name, ())):
            handler(payload)

    async def parallel(self, name: str, payload: Any) -> None:
        self.log.append((name, payload))
        async with anyio.create_task_group() as tg:
            for handler in tuple(self.listeners.get(name, ())):
                tg.start_soon(handler, payload)

    def names(self) -> list[str]:
        return [name for name, _ in self.log]


def user(text: str, id: str = "u1") -> dict[str, Any]:
    return {"message": {"id": id, "role": "user", "content": [{"type": "text", "text": text}]}}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"turn": 1, "step": 1, "message": {"role": "assistant", "content": list(blocks)}}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def result(call_id: str, content: str = "ok") -> dict[str, Any]:
    return {"turn": 1, "step": 1, "call_id": call_id, "content": content, "is_error": False}


@pytest.fixture
def session() -> Session:
    return SessionStore().create("s")


# -- append: identity, snapshot, immutability ---------------------------------------------


def test_append_assigns_contiguous_zero_based_seqs_and_epoch_time(session: Session) -> None:
    events = [session.append("turn/start", {"turn": i}) for i in range(3)]
    assert [e.seq for e in events] == [0, 1, 2]
    assert list(session.events) == events
    assert events[0].time <= events[1].time <= events[2].time
    assert events[0].time > 1.6e9
    assert session.append("x/ping").data == {}


class _Model(BaseModel):
    x: int = 1


class _Thing:
    pass


def _cycle() -> dict[str, Any]:
    inner: dict[str, Any] = {}
    data = {"meta": {"inner": inner}}
    inner["back"] = data
    return data


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"meta": {"x": math.nan}}, "data['meta']['x'] is nan"),
        ({"v": [1, math.inf]}, "data['v'][1] is inf"),
        ({"v": -math.inf}, "data['v'] is -inf"),
        ({"meta": {"x": {1, 2}}}, "data['meta']['x'] is a set"),
        ({"obj": _Thing()}, "data['obj'] is a _Thing object"),
        ({"model": _Model()}, "model_dump"),
        ({"meta": {1: "a"}}, "data['meta'] has a non-string key 1"),
        ({"b": b"raw"}, "data['b'] is bytes"),
        (_cycle(), "data['meta']['inner']['back'] is a cycle"),
    ],
)
def test_non_json_data_is_refused_naming_event_type_and_json_path(
    session: Session, data: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(TypeError) as info:
        session.append("tool/result", data)
    message = str(info.value)
    assert message.startswith("session event 'tool/result': ")
    assert fragment in message
    assert "event data must be JSON" in message
    assert len(session.events) == 0


def test_data_that_is_not_a_dict_is_refused(session: Session) -> None:
    with pytest.raises(TypeError, match=r"'x/y': data must be a dict"):
        session.append("x/y", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-empty str"):
        session.append("", {})


def test_str_enum_values_and_keys_are_kept_as_plain_strings(session: Session) -> None:
    import enum

    class Kind(enum.StrEnum):
        A = "a"

    event = session.append("x", {Kind.A: Kind.A, "n": True})
    assert type(next(iter(event.data))) is str
    assert type(event.data["a"]) is str
    assert event.data["n"] is True


def test_mutating_the_callers_data_after_append_changes_nothing(session: Session) -> None:
    data: dict[str, Any] = {"items": [1, {"k": "v"}], "meta": {"a": 1}}
    event = session.append("x/data", data)
    data["items"].append(2)
    data["items"][1]["k"] = "changed"
    data["meta"]["b"] = 2
    data["new"] = True
    assert event.data == {"items": (1, {"k": "v"}), "meta": {"a": 1}}
    assert session.events[0].data == event.data


def test_the_returned_event_and_its_data_cannot_be_mutated(session: Session) -> None:
    event = session.append("x/data", {"items": [{"k": "v"}], "meta": {"a": 1}})
    with pytest.raises(AttributeError):
        event.type = "other"
    with pytest.raises(AttributeError):
        del event.data
    with pytest.raises(TypeError, match="immutable"):
        event.data["meta"] = {}
    with pytest.raises(TypeError):
        event.data["meta"]["a"] = 2
    with pytest.raises(TypeError):
        event.data["items"][0].update(k="x")
    with pytest.raises(TypeError):
        event.data.pop("meta")
    with pytest.raises(TypeError):
        event.data |= {"x": 1}
    assert isinstance(event.data["items"], tuple)
    assert event.data == {"items": ({"k": "v"},), "meta": {"a": 1}}


def test_event_data_encodes_with_json_dumps_directly(session: Session) -> None:
    event = session.append("x", {"a": [1, 2.5, {"b": None}], "é": "ü"})
    assert json.loads(json.dumps(event.data)) == {"a": [1, 2.5, {"b": None}], "é": "ü"}
    line = event.to_json()
    assert json.loads(line) == json.loads(json.dumps(event.to_dict()))
    assert "ü" in line  # ensure_ascii=False


def test_event_round_trips_through_to_dict_and_pickle(session: Session) -> None:
    session.append("user/message", user("hi"))
    event = session.append(
        "user/message",
        user("summary", id="u2"),
        surface_op={"op": "replace", "start": 0, "end": 0},
        source_event_seqs=[0],
    )
    again = SessionEvent.from_dict(json.loads(event.to_json()))
    assert again == event
    assert pickle.loads(pickle.dumps(event)) == event
    assert copy.deepcopy(event) == event


def test_frozen_dict_constructor_checks_and_freezes_its_content() -> None:
    fd = FrozenDict({"a": [1, {"b": 2}]})
    assert fd == {"a": (1, {"b": 2})}
    assert isinstance(fd["a"][1], FrozenDict)
    with pytest.raises(TypeError, match=r"value\['a'\] is a set"):
        FrozenDict(a={1})
    assert pickle.loads(pickle.dumps(fd)) == fd
    assert dict(fd) == fd and type(fd.copy()) is dict
    nested: dict[str, Any] = {"leaf": [1.5]}
    for _ in range(40):  # deeper than any fast path: still accepted and frozen all the way
        nested = {"n": [nested]}
    frozen = freeze_json(nested, label="x")
    for _ in range(40):
        frozen = frozen["n"][0]
    assert frozen == {"leaf": (1.5,)} and type(frozen) is FrozenDict
    with pytest.raises(TypeError, match="nested too deeply"):
        deep: list[Any] = []
        node = deep
        for _ in range(10_000):
            node.append([])
            node = node[0]
        freeze_json({"d": deep}, label="x")


def test_events_view_is_read_only_and_live(session: Session) -> None:
    view = session.events
    session.append("a")
    assert len(view) == 1 and view[-1].type == "a"
    assert isinstance(view[0:1], tuple)
    assert not hasattr(view, "append")
    with pytest.raises(TypeError):
        view[0] = view[0]  # type: ignore[index]


# -- surface op and source seqs -----------------------------------------------------------


@pytest.mark.parametrize(
    "op",
    [
        "prepend",
        {"op": "replace", "start": 1, "end": 0},
        {"op": "replace", "start": -1, "end": 0},
        {"op": "replace", "start": 0},
        {"op": "replace", "start": True, "end": 0},
        {"op": "replace", "start": 0, "end": 0, "extra": 1},
    ],
)
def test_malformed_surface_op_is_refused(session: Session, op: Any) -> None:
    session.append("user/message", user("a"))
    with pytest.raises(ValueError, match=r"'user/message': invalid surface_op"):
        session.append("user/message", user("b"), surface_op=op)
    assert len(session.events) == 1


def test_source_event_seqs_must_name_earlier_events(session: Session) -> None:
    session.append("a")
    with pytest.raises(ValueError, match="earlier event"):
        session.append("b", source_event_seqs=[1])
    with pytest.raises(ValueError, match="list of event seqs"):
        session.append("b", source_event_seqs="0")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="list of event seqs"):
        session.append("b", source_event_seqs={0: "a"})  # type: ignore[arg-type]
    assert session.append("b", source_event_seqs=[0]).source_event_seqs == (0,)
    assert session.append("c", source_event_seqs=(0, 1)).source_event_seqs == (0, 1)
    assert session.append("d", source_event_seqs=iter([2])).source_event_seqs == (2,)  # type: ignore[arg-type]


# -- derivation ---------------------------------------------------------------------------


def test_derive_messages_maps_surface_events_and_ignores_log_only_types(
    session: Session,
) -> None:
    session.append("turn/start", {"turn": 1})
    session.append("user/message", user("hi"))
    session.append("assistant/chunk", {"turn": 1, "step": 1, "chunk": {"type": "x"}})
    session.append("assistant/message", assistant())  # empty: skipped
    session.append(
        "assistant/message",
        assistant(text("calling"), {"type": "tool-call", "id": "c1", "name": "echo"}),
    )
    session.append("tool/call", {"call_id": "c1", "name": "echo", "arguments": "{}"})
    session.append("tool/result", {**result("c1", "pong"), "name": "echo"})
    session.append("plugin/custom", {"anything": 1})
    messages = session.derive_messages()
    assert [type(m) for m in messages] == [UserMessage, AssistantMessage, ToolResultMessage]
    assert isinstance(messages[0], UserMessage) and messages[0].text == "hi"
    assert isinstance(messages[1], AssistantMessage) and messages[1].tool_calls[0].id == "c1"
    assert messages[2] == ToolResultMessage(call_id="c1", name="echo", content="pong")


def test_derive_messages_is_incremental_and_returns_a_fresh_list(session: Session) -> None:
    session.append("user/message", user("one"))
    first = session.derive_messages()
    first.clear()  # the caller owns the returned list
    again = session.derive_messages()
    assert len(again) == 1
    session.append("assistant/message", assistant(text("two")))
    grown = session.derive_messages()
    assert len(grown) == 2
    assert grown[0] is again[0]  # earlier nodes are reused, not rebuilt
    for i in range(200):
        session.append("assistant/chunk", {"i": i})
    assert session.derive_messages()[:2] == grown


def test_replace_surface_op_shadows_the_inclusive_surface_span(session: Session) -> None:
    session.append("user/message", user("a", id="a"))
    session.append("assistant/message", assistant(text("b")))
    session.append("user/message", user("c", id="c"))
    session.append("assistant/message", assistant(text("d")))
    session.derive_messages()
    session.append(
        "user/message",
        user("summary of a..c", id="s"),
        surface_op={"op": "replace", "start": 0, "end": 2},
        source_event_seqs=[0, 1, 2],
    )
    texts = [m.text for m in session.derive_messages() if not isinstance(m, ToolResultMessage)]
    assert texts == ["summary of a..c", "d"]
    session.append("user/message", user("e", id="e"))
    # A second replace indexes the *derived* surface, not event seqs.
    session.append(
        "user/message", user("all", id="t"), surface_op={"op": "replace", "start": 0, "end": 2}
    )
    assert [m.text for m in session.derive_messages()] == ["all"]  # type: ignore[union-attr]


def test_replace_outside_the_derived_surface_is_refused(session: Session) -> None:
    session.append("user/message", user("a"))
    with pytest.raises(ValueError, match="outside the derived surface"):
        session.append(
            "user/message", user("b"), surface_op={"op": "replace", "start": 0, "end": 1}
        )
    assert len(session.events) == 1


def test_surface_event_whose_data_is_not_a_message_is_refused_before_logging(
    session: Session,
) -> None:
    with pytest.raises(ValueError, match=r"'user/message' \(seq 0\).*message"):
        session.append("user/message", {"text": "no message key"})
    with pytest.raises(ValueError, match="'tool/result'"):
        session.append("tool/result", {"call_id": "c1", "content": 3})
    assert len(session.events) == 0


def test_request_header_is_the_last_logged_header(session: Session) -> None:
    assert session.request_header() is None
    session.append("request/header", {"header": {"config": {"model": "a"}}, "reason": "initial"})
    session.append("assistant/chunk", {})
    session.append("request/header", {"header": {"config": {"model": "b"}}, "reason": "change"})
    assert session.request_header() == {"config": {"model": "b"}}


# -- store: publication, events, veto ----------------------------------------------------


def test_create_emits_created_then_session_event_per_append() -> None:
    bus = FakeBus()
    store = SessionStore(bus)
    session = store.create("s1", meta={"cwd": "/work", "tag": "x"})
    event = session.append("a", {"n": 1})
    assert bus.names() == ["session/created", "session/event"]
    created, appended = bus.log[0][1], bus.log[1][1]
    assert created == SessionPayload(session)
    assert isinstance(appended, SessionEventPayload)
    assert appended.session is session and appended.event is event
    assert session.header.cwd == "/work" and session.header.meta == {"cwd": "/work", "tag": "x"}
    assert session.header.id == "s1" and session.header.version == HEADER_VERSION == 3


def test_an_append_calls_emit_only_while_session_event_has_a_listener() -> None:
    ctx = Context()
    emitted: list[str] = []
    real_emit = ctx.emit

    class Dispatch:  # the root Context, with its emits counted
        listened = ctx.listened
        emit_strict = ctx.emit_strict
        parallel = ctx.parallel

        def emit(self, name: str, payload: Any) -> None:
            emitted.append(name)
            real_emit(name, payload)

    session = SessionStore(Dispatch()).create("quiet")
    session.append("a")
    assert emitted == []
    seen: list[SessionEventPayload] = []
    dispose = ctx.on("session/event", seen.append)  # subscribed after publication
    event = session.append("b")
    assert emitted == ["session/event"]
    assert len(seen) == 1 and seen[0].session is session and seen[0].event is event
    dispose()
    session.append("c")
    assert emitted == ["session/event"] and len(session.events) == 3


def test_a_watcher_sees_each_append_before_session_event_while_the_session_is_published(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = FakeBus()
    store = SessionStore(bus)
    seen: list[str] = []
    bus.on("session/event", lambda p: seen.append(f"event {p.event.seq}"))
    session = store.prepare("w")
    with pytest.raises(RuntimeError, match="'w' is prepared"):
        session.watch_appends(lambda s: None)  # nothing to watch before publication

    def broken(watched: Any) -> None:
        raise ValueError("watcher bug")

    def watch(watched: Any) -> None:
        seen.append(f"watch {len(watched.events) - 1}")

    store.enter(session)
    session.watch_appends(broken)
    session.watch_appends(watch)
    session.watch_appends(watch)  # the same callback again: still one watcher
    session.append("a")
    assert seen == ["watch 0", "event 0"]  # a raising watcher logs; the others still run
    assert "watcher bug" in caplog.text and len(session.events) == 1
    session.unwatch_appends(broken)
    session.unwatch_appends(broken)  # not watching: a no-op
    session.append("b")
    assert seen[2:] == ["watch 1", "event 1"]
    store.detach(session)  # detached: every watcher dropped
    store.enter(reentered := store.prepare("w"))
    reentered.append("c")
    assert seen[4:] == ["event 0"]


def test_a_watcher_is_skipped_while_the_session_is_in_its_unless_container() -> None:
    bus = FakeBus()
    store = SessionStore(bus)
    session = store.prepare("u")
    store.enter(session)
    told: set[Session] = set()
    calls: list[int] = []
    plain: list[int] = []

    def watch(watched: Session) -> None:
        calls.append(len(watched.events) - 1)
        told.add(watched)  # what a writer does when it queues the session

    session.watch_appends(watch, unless=told)
    session.watch_appends(lambda s: plain.append(len(s.events) - 1))
    session.append("a")
    session.append("b")  # already told: no call
    assert calls == [0] and plain == [0, 1]
    told.discard(session)  # served (the writer took it): the next append calls again
    session.append("c")
    assert calls == [0, 2] and plain == [0, 1, 2]
    session.unwatch_appends(watch)
    told.clear()
    session.append("d")
    assert calls == [0, 2] and plain == [0, 1, 2, 3]


def test_a_vetoed_publication_drops_the_watchers_it_gained() -> None:
    bus = FakeBus()
    store = SessionStore(bus)
    watched: list[int] = []

    def watch_then_veto(payload: SessionPayload) -> None:
        payload.session.watch_appends(lambda s: watched.append(len(s.events)))
        raise RuntimeError("not today")

    undo = bus.on("session/created", watch_then_veto)
    session = store.prepare("v")
    with pytest.raises(RuntimeError, match="not today"):
        store.enter(session)
    session.append("still/private")
    assert watched == []
    undo()
    store.enter(session)
    session.append("public")
    assert watched == []  # watching is per publication: the vetoed one's watcher is gone


def test_prepared_session_announces_nothing_until_entered() -> None:
    bus = FakeBus()
    store = SessionStore(bus)
    session = store.prepare("p", seed=[("user/message", user("seed"))])
    session.append("b")
    assert bus.log == [] and store.get("p") is None and session.state == "prepared"
    store.enter(session)
    assert bus.names() == ["session/created"]
    assert store.get("p") is session and store.list() == [session]


def test_entering_a_taken_id_raises_value_error_naming_the_id() -> None:
    store = SessionStore(FakeBus())
    live = store.create("dup")
    with pytest.raises(ValueError, match="'dup' already exists"):
        store.create("dup")
    assert store.get("dup") is live


def test_a_raising_created_listener_vetoes_creation_and_frees_the_id() -> None:
    bus = FakeBus()

    def veto(payload: SessionPayload) -> None:
        raise RuntimeError("not today")

    undo = bus.on("session/created", veto)
    store = SessionStore(bus)
    session = store.prepare("v")
    with pytest.raises(RuntimeError, match="not today"):
        store.enter(session)
    assert store.get("v") is None and store.list() == []
    assert session.state == "prepared"
    session.append("still/private")  # unpublished again: no session/event
    assert bus.names() == ["session/created"]
    undo()
    assert store.create("v").id == "v"


def test_a_raising_session_event_observer_is_contained_and_append_succeeds() -> None:
    bus = FakeBus()
    seen: list[int] = []

    def broken(payload: SessionEventPayload) -> None:
        raise ValueError("observer bug")

    bus.on("session/event", broken)
    bus.on("session/event", lambda p: seen.append(p.event.seq))
    session = SessionStore(bus).create("o")
    event = session.append("a")
    assert event.seq == 0 and seen == [0] and len(session.events) == 1
    assert [str(e) for e in bus.contained] == ["observer bug"]


def test_detach_emits_disposed_once_and_the_session_refuses_appends() -> None:
    bus = FakeBus()
    store = SessionStore(bus)
    session = store.create("d")
    store.detach(session)
    store.detach(session)
    assert bus.names() == ["session/created", "session/disposed"]
    assert store.get("d") is None and session.state == "detached"
    with pytest.raises(RuntimeError, match="'d' is detached"):
        session.append("late")
    with pytest.raises(RuntimeError, match="detached"):
        store.enter(session)
    assert store.create("d") is not session  # the id is reusable


def test_create_mints_unique_ids_when_none_given() -> None:
    store = SessionStore()
    a, b = store.create(), store.create()
    assert a.id != b.id and a.id.startswith("session-")


@pytest.mark.anyio
async def test_flush_dispatches_session_flush_in_parallel_and_awaits_listeners() -> None:
    bus = FakeBus()
    started = anyio.Event()
    release = anyio.Event()
    done: list[str] = []

    async def slow(payload: SessionPayload) -> None:
        started.set()
        await release.wait()
        done.append(payload.session.id)

    bus.on("session/flush", slow)
    session = SessionStore(bus).create("f")
    async with anyio.create_task_group() as tg:
        tg.start_soon(session.flush)
        await started.wait()
        assert done == []
        release.set()
    assert done == ["f"]
    await SessionStore(bus).prepare("unpublished").flush()  # no-op
    assert bus.names().count("session/flush") == 1


# -- seeds, loaded events, fork -----------------------------------------------------------


def test_seed_accepts_pairs_event_dicts_and_events_and_snapshots_them() -> None:
    store = SessionStore()
    source = store.create("src")
    original = source.append("user/message", user("hi"))
    data = {"x": [1]}
    session = store.create(
        "seeded",
        seed=[("a", data), {"type": "b", "time": 5.0, "data": {"y": 1}}, original],
    )
    data["x"].append(2)
    assert [(e.seq, e.type) for e in session.events] == [(0, "a"), (1, "b"), (2, "user/message")]
    assert session.events[0].data == {"x": (1,)}
    assert session.events[1].time == 5.0
    assert session.events[2].time == original.time
    assert len(session.derive_messages()) == 1
    with pytest.raises(ValueError, match="invalid seed item"):
        store.create("bad", seed=["not an event"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="'c'"):
        store.create("bad", seed=[("c", {"v": math.nan})])
    assert store.get("bad") is None


def test_prepare_with_loaded_events_adopts_them_as_durable() -> None:
    store = SessionStore()
    header = SessionHeader("loaded", cwd="/w")
    events = [SessionEvent("request/header", 0, 1.0, {"header": {"h": 1}}), SessionEvent("a", 1)]
    session = store.prepare(header=header, events=events)
    assert session.durable_seq == 1 and session.header_durable
    assert session.request_header() == {"h": 1}
    assert session.append("b").seq == 2
    with pytest.raises(ValueError, match="contiguous"):
        store.prepare(header=SessionHeader("gap"), events=[SessionEvent("a", 1)])
    with pytest.raises(ValueError, match="header"):
        store.prepare("x", events=[])


def test_fork_seeds_the_prefix_and_records_the_parent() -> None:
    bus = FakeBus()
    store = SessionStore(bus)
    parent = store.create("parent", meta={"cwd": "/p", "k": 1})
    for text_ in ("a", "b", "c"):
        parent.append("user/message", user(text_, id=text_))
    child = store.fork(parent, 1)
    assert store.get(child.id) is child and child.id != parent.id
    assert child.header.meta == {"cwd": "/p", "k": 1, "fork": {"parent_id": "parent", "at_seq": 1}}
    assert child.header.cwd == "/p"
    assert [e.to_dict() for e in child.events] == [e.to_dict() for e in parent.events[:2]]
    assert [m.text for m in child.derive_messages()] == ["a", "b"]  # type: ignore[union-attr]
    child.append("user/message", user("d", id="d"))
    assert len(parent.events) == 3
    with pytest.raises(ValueError, match="at seq 3"):
        store.fork(parent, 3)
    named = store.fork(parent, 0, id="named-fork")
    assert named.id == "named-fork"


# -- the session's own life cycle (what the store drives) ---------------------------------


def test_the_store_drives_the_life_cycle_only_through_the_sessions_methods() -> None:
    bus = FakeBus()
    store = SessionStore(bus)
    session = store.prepare("life")
    assert session.state == "prepared" and session.store is store
    session.mark_published()  # a session published by hand announces its appends
    session.append("a")
    assert bus.names() == ["session/event"]
    with pytest.raises(RuntimeError, match="'life' is published, not prepared"):
        session.mark_published()
    session.mark_prepared()
    session.append("quiet")
    assert bus.names() == ["session/event"] and session.state == "prepared"
    assert session.mark_detached() == "prepared"
    assert session.mark_detached() == "detached"  # idempotent
    with pytest.raises(RuntimeError, match="detached"):
        session.mark_published()


def test_append_keeps_an_explicit_time_and_defaults_to_now(session: Session) -> None:
    copied = session.append("copied", {"v": 1}, time=12.5)
    fresh = session.append("fresh")
    assert copied.time == 12.5 and fresh.time > 1_000_000_000


def test_adopting_loaded_events_needs_an_empty_log(session: Session) -> None:
    session.append("already")
    with pytest.raises(ValueError, match="must start an empty log"):
        session.adopt_durable([SessionEvent("a", 0)])
    assert [e.type for e in session.events] == ["already"]


def test_mark_durable_never_moves_backwards(session: Session) -> None:
    for _ in range(3):
        session.append("a")
    session.mark_durable(-1, header=True)
    assert session.durable_seq == -1 and session.header_durable
    session.mark_durable(2)
    session.mark_durable(1)
    assert session.durable_seq == 2


@pytest.mark.anyio
async def test_flush_reaches_a_flush_listener_added_after_publication() -> None:
    # With nobody listening the flush dispatches nothing; the names listened to are a live
    # view, so a listener added later is awaited by the next flush.
    from agentloop_nb.app import App

    app = App(None)
    try:
        session = SessionStore(app.ctx).create("late-listener")
        await session.flush()  # nobody listens: returns at once
        flushed: list[str] = []

        async def on_flush(payload: SessionPayload) -> None:
            flushed.append(payload.session.id)

        app.ctx.on("session/flush", on_flush)
        await session.flush()
        assert flushed == ["late-listener"]
    finally:
        await app.aclose()

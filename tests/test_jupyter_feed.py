"""``SessionFeed``: streamed chunks folded once for every view of a session, telling the views
only what they have not been told yet."""

from __future__ import annotations

from typing import Any

import pytest

from agentloop_nb.context import Context
from agentloop_nb.jupyter import SessionView
from agentloop_nb.jupyter.fold import SessionFeed
from agentloop_nb.session import SessionStore
from agentloop_nb.session._frozen import wrap_frozen


def _streaming() -> tuple[Any, Any, SessionFeed]:
    """A session streaming turn 1's text block 0 (``session/chunk``), and its feed."""
    session = SessionStore(Context()).create("s")
    session.append("turn/start", {"turn": 1})
    feed = SessionFeed(session)
    log = session.open_chunks(1, 1, lambda index: None)
    return session, log, feed


def _start(log: Any) -> None:
    log.add(wrap_frozen({"type": "block-start", "index": 0, "block_type": "text"}))


def _delta(log: Any, text: str) -> None:
    log.add(wrap_frozen({"type": "text-delta", "index": 0, "text": text}))


def test_deltas_nobody_has_read_yet_are_told_once_and_read_whole() -> None:
    _, log, feed = _streaming()
    told: list[tuple[str, frozenset[int]]] = []
    feed.observe(lambda kind, items: told.append((kind, items)))
    _start(log)
    assert len(told) == 1 and told[0][0] == "assistant/chunk"
    (answer,) = told[0][1]
    for word in ("one ", "two ", "three "):
        _delta(log, word)
    # The observers hold the answer as changed and have not read it: nothing more to tell.
    assert len(told) == 1
    item = feed.transcript.items[answer]
    assert item.text == "one two three "
    _delta(log, "four ")  # read since it was told: told again
    _delta(log, "five ")
    assert told[1:] == [("assistant/chunk", frozenset({answer}))]
    assert item.text_from(4) == (len("one two three four five "), "two three four five ")
    _delta(log, "six")
    assert len(told) == 3 and item.text == "one two three four five six"
    feed.close()


def test_each_delta_is_told_to_observers_that_read_after_every_change() -> None:
    _, log, feed = _streaming()
    told: list[frozenset[int]] = []

    def reader(_kind: str, items: frozenset[int]) -> None:
        told.append(items)
        for index in items:
            assert feed.transcript.items[index].text is not None  # reads at once

    feed.observe(reader)
    _start(log)
    for word in ("a", "b", "c"):
        _delta(log, word)
    assert len(told) == 4  # block start and every delta: each one came after a read
    feed.close()


@pytest.mark.anyio
async def test_a_view_shows_every_delta_that_arrived_between_its_renders() -> None:
    session, log, feed = _streaming()
    view = SessionView(session, interval=0, feed=feed)
    _start(log)
    _delta(log, "so it ")
    await view.throttle.settled()
    answer = view.body.children[-1].children[-1]
    assert answer.value == "so it "
    for word in ("goes ", "on ", "and "):
        _delta(log, word)  # one render picks up all three
    await view.throttle.settled()
    assert answer.value == "so it goes on and "
    _delta(log, "on")
    await view.throttle.settled()
    assert answer.value == "so it goes on and on"
    view.close()
    feed.close()

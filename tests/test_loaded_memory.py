"""A loaded session log shares what it repeats instead of holding a copy per line: keys and
short strings are interned, equal small dicts of strings and ints are one frozen object, and
nothing changes type or value on the way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentloop_nb.session import FrozenDict, JsonlPersistence


def _write(root: Path, datas: list[Any]) -> None:
    header = {"type": "session", "version": 2, "id": "m", "created_at": 1.0, "cwd": None}
    lines = [json.dumps({**header, "meta": {}})]
    for seq, data in enumerate(datas):
        lines.append(json.dumps({"type": "x/y", "seq": seq, "time": 1.0, "data": data}))
    (root / "m.jsonl").write_text("\n".join(lines) + "\n")


def test_equal_small_dicts_of_a_loaded_log_are_one_frozen_object(tmp_path: Path) -> None:
    _write(
        tmp_path,
        [
            {"turn": 1, "step": 2},
            {"turn": 1, "step": 2},
            {"pair": [{"type": "block-end", "index": 0}, {"type": "block-end", "index": 0}]},
            {"turn": 1, "step": 3},
        ],
    )
    _, events = JsonlPersistence(tmp_path).load("m")
    assert events[0].data is events[1].data and type(events[0].data) is FrozenDict
    first, second = events[2].data["pair"]
    assert first is second and first == {"type": "block-end", "index": 0}
    assert events[3].data == {"turn": 1, "step": 3} and events[3].data is not events[0].data


def test_sharing_never_confuses_true_with_1_or_1_0_with_1(tmp_path: Path) -> None:
    _write(tmp_path, [{"a": 1}, {"a": True}, {"a": 1.0}, {"a": 1}])
    _, events = JsonlPersistence(tmp_path).load("m")
    values = [e.data["a"] for e in events]
    assert [type(v) for v in values] == [int, bool, float, int]
    assert events[0].data is events[3].data and events[1].data is not events[0].data


def test_keys_and_short_strings_of_a_loaded_log_are_one_object_each(tmp_path: Path) -> None:
    long = "a string longer than sixteen characters"
    _write(tmp_path, [{"kind": "text-delta", "text": long}, {"kind": "text-delta", "text": long}])
    _, events = JsonlPersistence(tmp_path).load("m")
    (key_a,), (key_b,) = ([k for k in e.data if k == "kind"] for e in events)
    assert key_a is key_b
    assert events[0].data["kind"] is events[1].data["kind"]
    assert events[0].data["text"] == events[1].data["text"] == long

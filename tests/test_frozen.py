"""The freeze walk (``session/_frozen.py``): one walker, a checked entry (``freeze_json``) and a
trusted one (``freeze_trusted``, for decoded JSON)."""

from __future__ import annotations

import json
from collections import OrderedDict, namedtuple
from typing import Any

import pytest

from agentloop_nb.session import FrozenDict, freeze_json
from agentloop_nb.session._frozen import freeze_plain_dict, freeze_trusted


def _same_shape(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_shape(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same_shape(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _list_cycle() -> dict[str, Any]:
    items: list[Any] = []
    items.append(items)
    return {"x": items}


def test_the_trusted_entry_freezes_decoded_json_as_the_checked_entry_does() -> None:
    decoded = json.loads('{"a": [1, 2.5, {"b": null, "c": [true, "x"]}], "d": {}, "e": []}')
    trusted = freeze_trusted(decoded)
    assert type(trusted) is FrozenDict and type(trusted["a"]) is tuple
    assert _same_shape(trusted, freeze_json(decoded, label="x"))


def test_a_container_shared_twice_is_not_a_cycle() -> None:
    shared = {"k": [1]}
    frozen = freeze_json({"a": shared, "b": [shared, shared]}, label="x")
    assert frozen == {"a": {"k": (1,)}, "b": ({"k": (1,)}, {"k": (1,)})}


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (_list_cycle, "data['x'][0] is a cycle"),
        (lambda: {"v": [1, [2, {3}]]}, "data['v'][1][1] is a set"),
        (lambda: {"p": namedtuple("Point", "x y")(1, 2)}, "data['p'] is a Point object"),
        (lambda: {"o": OrderedDict(a=[float("nan")])}, "data['o']['a'][0] is nan"),
    ],
)
def test_the_checked_entry_names_the_json_path_of_the_problem(make: Any, fragment: str) -> None:
    with pytest.raises(TypeError, match="event data must be JSON") as info:
        freeze_json(make(), label="x")
    assert fragment in str(info.value)


def test_subclasses_of_json_containers_are_frozen_like_the_plain_types() -> None:
    class Items(list[Any]):
        pass

    frozen = freeze_json({"o": OrderedDict(b=1), "l": Items([OrderedDict(c=(2,))])}, label="x")
    assert type(frozen["o"]) is FrozenDict and type(frozen["l"]) is tuple
    assert frozen == {"o": {"b": 1}, "l": ({"c": (2,)},)}


def test_the_label_free_entry_answers_none_where_the_checked_entry_would_raise() -> None:
    assert freeze_plain_dict({"a": [1, {"b": 2.0}]}) == {"a": (1, {"b": 2.0})}
    assert freeze_plain_dict({"a": {1, 2}}) is None
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    assert freeze_plain_dict(cyclic) is None

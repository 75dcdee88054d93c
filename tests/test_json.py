"""The package's one JSON encoder (``agentloop_nb._json``): orjson first, the standard library
for what orjson refuses, with the same bytes wherever both accept a value."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentloop_nb._json import dumps_arguments, dumps_bytes, dumps_str
from agentloop_nb.session import FrozenDict


def _stdlib(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


@pytest.mark.parametrize(
    "value",
    [
        {"s": 'héllo \u2028 \x1f \x7f / " \\ 😀', "f": 0.1, "e": 1e-300},
        {"a": [1, [2.5, {"k": None}], True], "b": {"": -0}, "z": -0.0},
        [1e16, 1e22, 1.2345678901234568e17, 5e-324, 1e15, -(2**63), 2**64 - 1],
        {"t": (1, "x"), "empty": [{}, [], ""]},
        FrozenDict({"nested": {"deep": [1, 2]}}),
        "just a string",
        None,
    ],
)
def test_both_encoders_write_the_same_compact_utf8_json(value: Any) -> None:
    assert dumps_str(value) == _stdlib(value)
    assert dumps_bytes(value) == _stdlib(value).encode("utf-8")


def test_ints_beyond_64_bits_take_the_standard_library() -> None:
    assert (
        dumps_bytes({"n": 2**70, "m": -(2**64)})
        == b'{"n":1180591620717411303424,"m":-18446744073709551616}'
    )
    assert dumps_str([2**70]) == "[1180591620717411303424]"


def test_a_lone_surrogate_is_escaped_in_bytes_and_kept_in_text() -> None:
    value = {"s": "\ud800é"}
    assert dumps_bytes(value) == b'{"s":"\\ud800\\u00e9"}'
    assert json.loads(dumps_bytes(value)) == value
    assert dumps_str(value) == '{"s":"\ud800é"}'


def test_non_string_keys_become_strings_as_in_the_standard_library() -> None:
    assert dumps_bytes({1: "a", None: "b"}) == b'{"1":"a","null":"b"}'


@pytest.mark.parametrize("bad", [object(), {1, 2}, b"raw"])
def test_a_value_neither_encoder_accepts_raises_type_error(bad: Any) -> None:
    with pytest.raises(TypeError):
        dumps_bytes({"x": bad})
    with pytest.raises(TypeError):
        dumps_str([bad])


def test_tool_argument_text_keeps_the_spaced_standard_form() -> None:
    assert dumps_arguments({"a": 1, "b": ["é"]}) == '{"a": 1, "b": ["\\u00e9"]}'

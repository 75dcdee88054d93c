"""``App.from_file`` treats a configuration file as untrusted input: bounded, alias-free, and
every error names the file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from agentloop_nb import App

ALIAS_BOMB = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def test_yaml_alias_bomb_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB, encoding="utf-8")
    started = time.process_time()
    with pytest.raises(ValueError, match=r"bomb\.yaml.*aliases are not allowed"):
        App.from_file(path)
    # A refusal, not an expansion: nowhere near the seconds an expansion would take.
    assert time.process_time() - started < 5


def test_missing_file_error_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"nope\.toml"):
        App.from_file(tmp_path / "nope.toml")


def test_syntax_error_names_the_file_and_format(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("max_parallel_tool_calls = = 3\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken\.toml is not valid TOML"):
        App.from_file(path)


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"list\.yaml must hold a mapping"):
        App.from_file(path)


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text("x: " + "a" * (1 << 21) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"huge\.yaml is larger than"):
        App.from_file(path)


def test_invalid_setting_error_names_the_field_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("max_parallel_tool_calls = -2\n", encoding="utf-8")
    with pytest.raises(ValidationError, match="max_parallel_tool_calls") as info:
        App.from_file(path)
    assert any("bad.toml" in note for note in info.value.__notes__)


def test_empty_yaml_file_is_the_default_app(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("", encoding="utf-8")
    app = App.from_file(path)
    assert app.config.max_parallel_tool_calls == 10

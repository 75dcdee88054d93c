"""What the model reads of a cell's outputs (``summarize``): each kind of output, the bounds,
and an image over 1 MB when Pillow cannot be imported."""

from __future__ import annotations

import builtins
from typing import Any

import nbformat
import pytest
from _notebook_helpers import png_b64

from agentloop_nb.jupyter.notebook import summarize

v4 = nbformat.v4


def test_rich_outputs_read_as_their_best_text_form() -> None:
    outputs = [
        v4.new_output(
            "display_data", data={"text/markdown": "**bold** note", "text/plain": "<Markdown>"}
        ),
        v4.new_output("execute_result", data={"text/plain": "[1, 2, 3]"}, execution_count=1),
        v4.new_output(
            "display_data",
            data={
                "application/vnd.jupyter.widget-view+json": {
                    "model_id": "abc123",
                    "version_major": 2,
                },
                "text/plain": "IntSlider(value=3)",
            },
        ),
        v4.new_output("display_data", data={"text/html": "<p>Hello <b>there</b></p>"}),
        v4.new_output("stream", name="stderr", text="warn 1\n"),
        v4.new_output("stream", name="stderr", text="warn 2\n"),
    ]
    text = summarize(outputs, max_chars=2000).text
    assert text.splitlines() == [
        "display: **bold** note",
        "value: [1, 2, 3]",
        "display: widget IntSlider",
        "display: Hello there",
        "stderr:",
        "warn 1",
        "warn 2",
    ]


def test_an_unknown_widget_is_named_by_its_model_id() -> None:
    view = {"application/vnd.jupyter.widget-view+json": {"model_id": "m-77", "version_major": 2}}
    text = summarize([v4.new_output("display_data", data=view)], max_chars=500).text
    assert text == "display: a widget (model m-77)"


def test_a_huge_single_line_is_cut_in_the_middle_within_the_bound() -> None:
    line = "a" * 50_000 + "END"
    text = summarize([v4.new_output("stream", name="stdout", text=line)], max_chars=1000).text
    assert len(text) <= 1000 and text.endswith("END") and "characters dropped" in text


def test_secrets_are_masked_in_every_kind_of_output() -> None:
    secret = "tok-1234567890"
    outputs = [
        v4.new_output("stream", name="stdout", text=f"the key is {secret}\n"),
        v4.new_output(
            "error",
            ename="KeyError",
            evalue=secret,
            traceback=[f"\x1b[31mKeyError\x1b[0m: {secret}"],
        ),
        v4.new_output("execute_result", data={"text/plain": repr(secret)}, execution_count=2),
    ]
    text = summarize(outputs, max_chars=2000, secrets=[secret]).text
    assert secret not in text and text.count("[secret]") == 4


def test_an_image_over_one_megabyte_is_left_out_with_a_note_without_pillow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_import = builtins.__import__

    def no_pillow(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "PIL" or name.startswith("PIL."):
            raise ImportError("no Pillow here")
        return real_import(name, *args, **kwargs)

    big = png_b64(size=(900, 900), noise=True)
    monkeypatch.setattr(builtins, "__import__", no_pillow)
    summary = summarize([v4.new_output("display_data", data={"image/png": big})], max_chars=1000)
    assert summary.images == []
    assert "left out (over 1 MB; Pillow is not installed to shrink it)" in summary.text


def test_a_small_image_is_attached_as_is() -> None:
    small = png_b64()
    summary = summarize([v4.new_output("display_data", data={"image/png": small})], max_chars=500)
    assert summary.images == [("image/png", small)]

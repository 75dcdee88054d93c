"""Summaries of live objects (``inspect_variable``'s text) and the offline model's kernel
phrases, without a kernel."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import pytest

from agentloop_nb import AgentOptions, App
from agentloop_nb.jupyter import WidgetApproval, kernel_tools
from agentloop_nb.jupyter._state import KernelState, attach, current, detach
from agentloop_nb.jupyter.kernel import Describers, close_matches, describe, is_secret
from agentloop_nb.jupyter.kernel._describe import short_summary
from agentloop_nb.llm import GenerateOptions
from agentloop_nb.llm.offline import OfflineModel
from agentloop_nb.messages import TextBlock, ToolResultMessage, UserMessage


def test_every_summary_stays_within_max_chars() -> None:
    values: list[Any] = [
        list(range(1_000_000)),
        {str(i): "x" * 100 for i in range(10_000)},
        "y" * 100_000,
        pd.DataFrame({f"c{i}": range(50) for i in range(60)}),
        np.zeros((1000, 1000)),
        object(),
    ]
    for value in values:
        for limit in (200, 1000, 4000):
            assert len(describe(value, limit)) <= limit


def test_huge_frame_describes_a_sample_and_names_shape_dtypes_and_head() -> None:
    df = pd.DataFrame({"n": np.arange(300_000), "s": ["a"] * 300_000})
    text = describe(df, 4000)
    assert "shape: 300000 rows x 2 columns" in text
    assert "dtypes: n: int64" in text
    assert "head():" in text
    assert "describe() (on a 100000-row sample):" in text


def test_array_summary_has_shape_dtype_and_statistics() -> None:
    text = describe(np.arange(12, dtype=np.int32).reshape(3, 4), 1000)
    assert "shape: (3, 4), dtype: int32" in text
    assert "min: 0, max: 11, mean: 5.5" in text
    assert short_summary(np.arange(6).reshape(2, 3)) == "shape 2x3, dtype int64"


def test_repr_llm_wins_over_a_registered_describer_which_wins_over_builtins() -> None:
    class Plain:
        pass

    class Talks(Plain):
        def _repr_llm_(self) -> str:
            return "I describe myself"

    registry = Describers()
    undo = registry.register(Plain, lambda obj, limit: "described by the user " * 500)
    assert describe(Talks(), 300, registry) == "I describe myself"
    described = describe(Plain(), 300, registry)
    assert described.startswith("described by the user") and len(described) <= 300
    assert describe(Plain(), 300).startswith("type: ")  # without the registry: built-ins
    undo()
    assert describe(Plain(), 300, registry).startswith("type: ")


def test_a_failing_repr_llm_is_reported_not_raised() -> None:
    class Broken:
        def _repr_llm_(self) -> str:
            raise RuntimeError("nope")

    assert describe(Broken(), 500) == "(_repr_llm_ failed: RuntimeError: nope)"


def test_describe_refuses_a_non_class_before_looking_for_a_registry() -> None:
    with pytest.raises(TypeError, match="expected a class"):
        kernel_tools.describe("str", lambda o, n: "")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be callable"):
        Describers().register(int, "not callable")  # type: ignore[arg-type]


def test_secret_names_and_close_matches() -> None:
    assert all(is_secret(n) for n in ("api_key", "GITHUB_TOKEN", "my_secret", "Password1"))
    assert is_secret("monkey_count")  # "contains" is literal: conservative on purpose
    assert not is_secret("sales")
    assert close_matches("sale", ["sales", "scale", "other"])[0] == "sales"


def test_callable_summary_is_signature_and_first_paragraph() -> None:
    def f(a: int, b: str = "x") -> bool:
        """First paragraph
        continues here.

        Second paragraph."""
        return True

    text = describe(f, 1000)
    assert "f(a: int, b: str = 'x') -> bool" in text
    assert "First paragraph\ncontinues here." in text and "Second" not in text


def _kernel_tools_schemas() -> list[dict[str, Any]]:
    def one(tool_name: str, **props: str) -> dict[str, Any]:
        return {
            "name": tool_name,
            "description": tool_name,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": t} for k, t in props.items()},
            },
        }

    return [
        one("list_variables"),
        one("inspect_variable", name="string"),
        one("run_python", code="string"),
        one("notebook_history", n="integer"),
    ]


@pytest.mark.parametrize(
    ("said", "call"),
    [
        ("variables", ("list_variables", {})),
        ("inspect df", ("inspect_variable", {"name": "df"})),
        ("run:   x = 1\nprint(x)", ("run_python", {"code": "x = 1\nprint(x)"})),
        ("history", ("notebook_history", {})),
    ],
)
def test_offline_model_maps_the_pinned_kernel_phrases(
    said: str, call: tuple[str, dict[str, Any]]
) -> None:
    options = GenerateOptions(
        provider="offline",
        model="demo",
        messages=(UserMessage(id="u1", content=(TextBlock(text=said),)),),
        tools=_kernel_tools_schemas(),
    )
    text, made = OfflineModel(token_delay=0).respond(options)
    assert text == "" and made is not None
    assert (made[1], made[2]) == call
    json.dumps(made[2])


def test_offline_model_reads_the_request_from_the_last_text_block() -> None:
    message = UserMessage(
        id="u1", content=(TextBlock(text="df = a summary"), TextBlock(text="inspect df"))
    )
    options = GenerateOptions(
        provider="offline", model="demo", messages=(message,), tools=_kernel_tools_schemas()
    )
    _, made = OfflineModel(token_delay=0).respond(options)
    assert made is not None and made[1] == "inspect_variable"


def test_offline_model_quotes_the_first_line_of_a_result() -> None:
    options = GenerateOptions(
        provider="offline",
        model="demo",
        messages=(
            UserMessage(id="u1", content=(TextBlock(text="variables"),)),
            ToolResultMessage(call_id="c1", content="a: int — 1\nb: str\nc: list"),
        ),
    )
    text, _ = OfflineModel(token_delay=0).respond(options)
    assert text == "The result is a: int — 1 (and 2 more lines)"


def test_approval_view_detail_is_the_highlighted_code_of_run_python_only() -> None:
    from agentloop_nb.jupyter.kernel._tools import approval_detail_html

    html = approval_detail_html(json.dumps({"code": "x = 1  # <b>"}))
    assert html is not None and "<span" in html and "&lt;b&gt;" in html
    assert approval_detail_html(json.dumps({"source": "x"})) is None
    assert approval_detail_html("not json") is None


def test_a_describer_may_take_the_object_alone_or_also_the_budget() -> None:
    class Point:
        pass

    class Line:
        pass

    class Bad:
        pass

    registry = Describers()
    one = registry.register(Point, lambda p: "a point")
    two = registry.register(Line, lambda obj, max_chars: "x" * max_chars)
    assert describe(Point(), 100, registry) == "a point"
    assert describe(Line(), 5, registry) == "xxxxx"
    with pytest.raises(TypeError, match=r"\(obj\) or \(obj, max_chars\)"):
        registry.register(Bad, lambda: "no object")
    one()
    two()
    assert describe(Point(), 100, registry) != "a point"  # unregistered
    assert len(registry) == 0


def test_the_most_specific_registered_class_describes_and_a_failing_describer_is_reported() -> None:
    class Base:
        pass

    class Derived(Base):
        pass

    registry = Describers()
    registry.register(Base, lambda obj: "a base")
    registry.register(Derived, lambda obj: 1 / 0)
    assert describe(Base(), 100, registry) == "a base"
    assert describe(Derived(), 100, registry) == (
        "(describer failed: ZeroDivisionError: division by zero)"
    )


@pytest.mark.anyio
async def test_kernel_tools_describe_registers_in_the_loaded_kernel_state_and_leaves_with_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Point:
        pass

    # No IPython shell in this process (another test may have made the singleton one).
    monkeypatch.setattr("IPython.get_ipython", lambda: None)
    assert current() is None
    with pytest.raises(RuntimeError, match="no IPython shell is running"):
        kernel_tools.describe(Point, lambda p: "a point")
    app = App()
    state = KernelState(None, app, WidgetApproval())
    attach(state)
    try:
        undo = kernel_tools.describe(Point, lambda p: "a point")
        # The state's registry is the App's ``describers`` service: what the tools consult.
        assert app.ctx.describers is state.describers
        assert describe(Point(), 100, state.describers) == "a point"
        undo()
        assert describe(Point(), 100, state.describers) != "a point"
        kernel_tools.describe(Point, lambda p: "a point")
    finally:
        detach()
        state.close()
    # Unloaded: the registry went with the state (a next load starts with none).
    with pytest.raises(AttributeError):
        app.ctx.describers  # noqa: B018
    with pytest.raises(RuntimeError, match="no IPython shell is running"):
        kernel_tools.describe(Point, lambda p: "a point")
    await app.aclose()


@pytest.mark.anyio
async def test_kernel_tools_describe_with_ctx_uses_that_apps_registry_without_the_extension() -> (
    None
):
    class Point:
        pass

    app = App()
    with pytest.raises(RuntimeError, match="provides no 'describers' service"):
        kernel_tools.describe(Point, lambda p: "a point", ctx=app.ctx)
    registry = Describers()
    app.ctx.provide("describers", registry)
    agent = app.agent_loop.create("a", AgentOptions(provider="offline", model="demo"))
    kernel_tools.describe(Point, lambda p: "a point", ctx=agent.ctx)  # an agent sees the App's
    assert describe(Point(), 100, registry) == "a point"
    await app.aclose()

"""The model table: longest-prefix lookup, unknown models, `App(models=...)` overrides that keep
the fields they do not name, rejected entries, and the cost arithmetic."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentloop_nb import App
from agentloop_nb.models import DEFAULT_TABLE, KNOWN_MODELS, ModelInfo, ModelTable, cost_usd

pytestmark = pytest.mark.anyio


def test_a_dated_model_name_finds_its_longest_prefix() -> None:
    mini = DEFAULT_TABLE.lookup("gpt-4o-mini-2024-07-18")
    assert mini == KNOWN_MODELS["gpt-4o-mini"]
    assert DEFAULT_TABLE.lookup("gpt-4o-2024-08-06") == KNOWN_MODELS["gpt-4o"]
    assert mini != KNOWN_MODELS["gpt-4o"]


def test_an_unknown_model_has_no_window_and_no_prices() -> None:
    info = DEFAULT_TABLE.lookup("my-private-model")
    assert info == ModelInfo()
    assert info.context_window is None and info.input is None
    assert DEFAULT_TABLE.lookup(None) == ModelInfo()


def test_an_override_keeps_the_fields_it_does_not_name() -> None:
    table = ModelTable({"gpt-4o-mini": {"context_window": 8_000}})
    info = table.lookup("gpt-4o-mini")
    assert info.context_window == 8_000
    assert info.input == KNOWN_MODELS["gpt-4o-mini"].input


def test_a_new_prefix_adds_an_entry_more_specific_than_the_built_in() -> None:
    table = ModelTable({"gpt-4o-mini-tuned": {"input": 9.0}})
    assert table.lookup("gpt-4o-mini-tuned-v2").input == 9.0
    assert table.lookup("gpt-4o-mini-tuned-v2").output == KNOWN_MODELS["gpt-4o-mini"].output
    assert table.lookup("local-llama").input is None


async def test_app_models_override_is_the_models_service() -> None:
    app = App(models={"local-": {"context_window": 4096, "input": 0, "output": 0}})
    try:
        assert app.ctx.models.lookup("local-llama").context_window == 4096
        assert app.ctx.models.lookup("gpt-4o").input == KNOWN_MODELS["gpt-4o"].input
    finally:
        await app.aclose()


async def test_an_app_without_overrides_serves_the_built_in_table_itself() -> None:
    # A table never changes after construction, so every App without overrides shares the
    # built-in one (and the longest prefix it found for each model name).
    first, second = App(), App(models={})
    try:
        assert first.ctx.models is DEFAULT_TABLE
        assert second.ctx.models is DEFAULT_TABLE
        assert first.ctx.models.lookup("gpt-4o").input == KNOWN_MODELS["gpt-4o"].input
    finally:
        await first.aclose()
        await second.aclose()


@pytest.mark.parametrize(
    "entry",
    [{"window": 10}, {"input": -1.0}, {"context_window": 0}, {"output": "cheap"}],
)
def test_a_bad_models_entry_fails_validation_naming_the_field(entry: dict[str, object]) -> None:
    with pytest.raises(ValidationError, match="models"):
        App(models={"x": entry})


def test_cost_is_the_sum_of_each_category_at_its_price_per_million() -> None:
    info = ModelInfo(1000, input=2.0, output=10.0, cache_read=0.5, cache_write=4.0)
    tokens = {
        "input": 1_000_000,
        "output": 500_000,
        "cache_read": 2_000_000,
        "cache_write": 250_000,
    }
    assert cost_usd(tokens, info) == pytest.approx(2.0 + 5.0 + 1.0 + 1.0)


def test_cost_is_unknown_only_when_a_category_with_tokens_has_no_price() -> None:
    info = ModelInfo(1000, input=1.0, output=1.0)
    assert cost_usd({"input": 10, "output": 10, "cache_read": 0}, info) == pytest.approx(20e-6)
    assert cost_usd({"input": 10, "cache_read": 5}, info) is None
    assert cost_usd({}, ModelInfo()) == 0.0


def test_lookups_stay_exact_for_more_distinct_names_than_the_table_remembers() -> None:
    table = ModelTable({"acme-": {"context_window": 1_000}})
    names = [f"acme-{i}" for i in range(3_000)] + [f"zzz-{i}" for i in range(3_000)]
    for _ in range(2):  # the second pass answers from what the first remembered (or re-scans)
        for name in names:
            expected = 1_000 if name.startswith("acme-") else None
            assert table.context_window(name) == expected
            assert table.configured_window(name) == expected
    assert table.lookup("claude-sonnet-4-20250514") == KNOWN_MODELS["claude-sonnet-4"]
    assert table.configured_window("claude-sonnet-4-20250514") is None

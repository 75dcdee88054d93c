"""The curated public surface: what tests outside this repo import (SPEC §6, §8)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentloop_nb

SPEC_NAMES = {
    # SPEC §8 testing contract and §6 decisions
    "App",
    "AgentOptions",
    "tool",
    "Allow",
    "Deny",
    "Ask",
    "Accept",
    "Block",
    "Enter",
    "Reject",
    "Retry",
    # services and core types named by SPEC §2-§4
    "Context",
    "InactiveContextError",
    "AbortController",
    "AbortSignal",
    "Agent",
    "AgentLoop",
    "AgentLoopConfig",
    "AgentConfig",
    "JsonlPersistence",
    "LlmError",
    "GenerateOptions",
    "SessionEvent",
    "Session",
    "SessionStore",
    "Tool",
    "ToolExecution",
    "ToolResult",
    "InvariantError",
    "load_ipython_extension",
    "unload_ipython_extension",
}


def test_every_spec_name_is_exported_from_the_root() -> None:
    missing = SPEC_NAMES - set(agentloop_nb.__all__)
    assert not missing, f"missing from agentloop_nb.__all__: {sorted(missing)}"
    for name in agentloop_nb.__all__:
        assert hasattr(agentloop_nb, name), name


def test_all_is_sorted_and_unique() -> None:
    assert list(agentloop_nb.__all__) == sorted(agentloop_nb.__all__)
    assert len(set(agentloop_nb.__all__)) == len(agentloop_nb.__all__)


def test_testing_module_exports_the_script_helpers() -> None:
    from agentloop_nb import testing

    for name in (
        "ScriptedModel",
        "text",
        "tool_call",
        "max_tokens",
        "error",
        "HANG",
        "hang_after",
        "combine",
    ):
        assert name in testing.__all__, name


def test_importing_the_core_does_not_import_ipython_or_ipywidgets() -> None:
    code = (
        "import sys, agentloop_nb, agentloop_nb.testing, agentloop_nb.app;"
        "bad=[m for m in ('ipywidgets','IPython') if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"core import pulled in {out.stdout.strip()}"


def test_decisions_accept_their_spec_signatures_positionally() -> None:
    from agentloop_nb import Accept, Allow, Ask, Block, Deny, Enter, Reject, Retry

    assert Deny("no network", {"host": "x"}) == Deny(reason="no network", info={"host": "x"})
    assert Ask("sure?").reason == "sure?"
    assert Accept("new", ("ctx",)) == Accept(content="new", additional_contexts=("ctx",))
    assert Block("not that").feedback == "not that"
    assert Enter(()).messages == () and Reject("why").reason == "why"
    assert Allow() == Allow() and Retry().kind == "retry"
    with pytest.raises(TypeError, match="at most 2 positional"):
        Deny("a", None, "extra")
    with pytest.raises(TypeError, match="multiple values for 'reason'"):
        Deny("a", reason="b")

"""The curated public surface: what tests outside this repo import (the testing contract, the
decisions, the services and core types, and the public catalogue modules)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentloop_nb

SPEC_NAMES = {
    # the testing contract and the decisions
    "App",
    "AgentOptions",
    "AgentTurnError",
    "tool",
    "Allow",
    "Deny",
    "Ask",
    "Accept",
    "Block",
    "Enter",
    "Reject",
    "Retry",
    # services and core types
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
        "ReplayModel",
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


# The hook catalogue's names and payloads (plugins import them from ``agentloop_nb.hooks``).
HOOK_NAMES = {
    "agent/created",
    "agent/session-start",
    "agent/disposed",
    "agent/status",
    "agent/error",
    "agent/inbox/inserted",
    "agent/inbox/discarded",
    "agent/inbox/claimed",
    "agent/pre-step",
    "agent/request",
    "agent/request-error",
    "agent/turn-stopping",
    "tools/pre-execute",
    "tools/execute",
    "tools/post-execute",
    "tools/settled",
    "tools/result",
    "llm/stream",
    "system-prompt/assemble",
    "session/created",
    "session/disposed",
    "session/event",
    "session/chunk",
    "session/flush",
    "internal/error",
}
HOOKS_MODULE_NAMES = {
    "HOOKS",
    "HookSpec",
    "AgentPayload",
    "SessionStartPayload",
    "StatusPayload",
    "ErrorPayload",
    "InboxPayload",
    "ClaimedPayload",
    "PreStepPayload",
    "RequestPayload",
    "RequestErrorPayload",
    "TurnStoppingPayload",
    "ToolExecution",
    "PostExecutePayload",
    "ToolResultPayload",
    "LlmStreamPayload",
    "AssemblePayload",
    "SessionPayload",
    "SessionEventPayload",
    "ErrorReport",
    "RequestConfig",
    "Accept",
    "Allow",
    "Ask",
    "Block",
    "Deny",
    "Enter",
    "Reject",
    "Retry",
}
EVENTS_MODULE_NAMES = {
    "EVENTS",
    "EventSpec",
    "SURFACE_TYPES",
    "TURN_END_REASONS",
    "AGENT_INBOX_SPLICED",
    "TURN_START",
    "TURN_END",
    "STEP_START",
    "STEP_END",
    "USER_MESSAGE",
    "REQUEST_HEADER",
    "ASSISTANT_CHUNK",
    "ASSISTANT_MESSAGE",
    "ASSISTANT_ATTEMPT",
    "TOOL_CALL",
    "TOOL_RESULT",
    "LLM_RETRY",
    "TurnEndReason",
    "ToolResultData",
}


@pytest.mark.parametrize(
    ("module_name", "expected"),
    [("agentloop_nb.hooks", HOOKS_MODULE_NAMES), ("agentloop_nb.events", EVENTS_MODULE_NAMES)],
)
def test_catalogue_modules_export_their_names(module_name: str, expected: set[str]) -> None:
    import importlib

    module = importlib.import_module(module_name)
    exported = list(module.__all__)
    missing = expected - set(exported)
    assert not missing, f"missing from {module_name}.__all__: {sorted(missing)}"
    assert len(set(exported)) == len(exported)  # the order is ruff's (RUF022)
    for name in exported:
        assert hasattr(module, name), f"{module_name}.{name}"


def test_the_hook_catalogue_names_every_hook_and_the_root_shares_its_decisions() -> None:
    from agentloop_nb import hooks

    assert set(hooks.HOOKS) == HOOK_NAMES
    for name in ("Accept", "Allow", "Ask", "Block", "Deny", "Enter", "Reject", "Retry"):
        assert getattr(agentloop_nb, name) is getattr(hooks, name), name
    assert agentloop_nb.RequestConfig is hooks.RequestConfig


def test_loop_payload_imports_keep_working_from_the_loop_package() -> None:
    from agentloop_nb import hooks, loop

    assert (loop.Enter, loop.Reject, loop.Retry, loop.RequestConfig) == (
        hooks.Enter,
        hooks.Reject,
        hooks.Retry,
        hooks.RequestConfig,
    )


def test_every_exception_class_of_the_package_derives_from_agentloop_error() -> None:
    import importlib
    import pkgutil

    import agentloop_nb
    from agentloop_nb import AgentloopError

    found: list[type[BaseException]] = []
    for info in pkgutil.walk_packages(agentloop_nb.__path__, "agentloop_nb."):
        if info.name == "agentloop_nb._docgen":
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__.startswith("agentloop_nb")
            ):
                found.append(value)
    assert len(found) >= 15, found  # the walk really reached the package's exceptions
    strays = sorted(c.__qualname__ for c in found if not issubclass(c, AgentloopError))
    assert strays == [], f"give these AgentloopError as a (second) base: {strays}"
    # the historical bases stay, so existing except clauses still catch them
    from agentloop_nb.session import SessionNotFoundError

    assert issubclass(SessionNotFoundError, LookupError)


def test_public_names_report_the_public_path_and_still_pickle() -> None:
    import pickle

    import pydantic

    from agentloop_nb import AgentOptions, SessionEvent, TextBlock, UserMessage

    classes = [
        getattr(agentloop_nb, name)
        for name in agentloop_nb.__all__
        if name != "InvariantError" and isinstance(getattr(agentloop_nb, name), type)
    ]
    assert len(classes) > 40  # the walk really saw the public classes
    assert [c for c in classes if c.__module__ != "agentloop_nb"] == []
    assert agentloop_nb.tool.__module__ == "agentloop_nb"
    assert repr(agentloop_nb.Agent) == "<class 'agentloop_nb.Agent'>"
    # the submodule paths still hand out the very same objects
    from agentloop_nb.loop import Agent

    assert Agent is agentloop_nb.Agent
    message = UserMessage(id="m1", content=[TextBlock(text="hi")])
    event = SessionEvent.from_dict({"type": "note", "seq": 0, "time": 1.0, "data": {"a": [1]}})
    for value in (message, AgentOptions(max_tokens=3), event):
        assert pickle.loads(pickle.dumps(value)) == value
    # the deferred pydantic builds still resolve their annotations after the rename
    models = [c for c in classes if issubclass(c, pydantic.BaseModel)]
    assert len(models) > 5
    assert [c for c in models if c.model_rebuild(force=True) is not True] == []


@pytest.mark.anyio
async def test_the_agent_like_protocol_of_hook_payloads_matches_the_real_agent() -> None:
    import inspect
    import typing

    from agentloop_nb import App
    from agentloop_nb.hooks import HOOKS, AgentLike

    members = sorted(n for n in vars(AgentLike) if not n.startswith("_"))
    assert len(members) > 10  # the walk really saw the protocol's members
    app = App()
    agent = app.agent_loop.create("a")
    for name in members:
        declared, real = getattr(AgentLike, name), getattr(type(agent), name, None)
        if isinstance(declared, property):
            assert hasattr(agent, name), name
        else:
            assert callable(real), name
            want = [(p.name, p.kind) for p in inspect.signature(declared).parameters.values()]
            got = [(p.name, p.kind) for p in inspect.signature(real).parameters.values()]
            assert got == want, name
    # every loop payload (those whose first field is the agent) is typed with the protocol
    loop_payloads = {s.payload for s in HOOKS.values() if s.dispatcher.startswith("loop")}
    assert len(loop_payloads) >= 8
    for payload in loop_payloads:
        hints = typing.get_type_hints(payload)
        assert hints.get("agent") is AgentLike, payload
    await app.aclose()

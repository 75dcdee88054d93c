"""Internal objects never print as a notebook cell's output (IPython's display hook)."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from agentloop_nb.app import App
from agentloop_nb.session._frozen import FrozenDict


@pytest.fixture
def shell() -> InteractiveShell:
    config = Config()
    config.HistoryManager.enabled = False
    return InteractiveShell.instance(config=config)


def test_handles_and_scopes_show_nothing_and_frozen_dicts_show_their_mapping(
    shell: InteractiveShell,
) -> None:
    app = App()
    shell.user_ns.update(
        disposer=app.ctx.on("agent/status", lambda _payload: None),
        scope=app.ctx.child(name="cellplugin").fiber,
        meta=FrozenDict({"cwd": "/w", "tags": ["a"]}),
    )
    for name in ("disposer", "scope"):
        # No data to show: a kernel then sends no execute_result at all.
        assert shell.display_formatter.format(shell.user_ns[name]) == ({}, {}), name
    shown, _ = shell.display_formatter.format(shell.user_ns["meta"])
    assert shown == {"text/plain": "{'cwd': '/w', 'tags': ('a',)}"}
    assert repr(shell.user_ns["disposer"]) == "<Disposer live>"  # repr still says what it is
    assert repr(shell.user_ns["scope"]).startswith("<Fiber ")

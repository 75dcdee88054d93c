"""Helpers for the view tests: an App answering from a script, its agent, and an agent whose
first tool call waits for approval in an :class:`AgentView`."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from agentloop_nb.app import App
from agentloop_nb.jupyter import AgentView, WidgetApproval
from agentloop_nb.loop import AgentOptions
from agentloop_nb.testing import ScriptedModel
from agentloop_nb.tools import Ask


def scripted_app(script: list[Any]) -> tuple[App, ScriptedModel]:
    """An App whose provider ``scripted`` answers from ``script``; the caller closes it."""
    app = App()
    model = ScriptedModel(script)
    app.ctx.llm.register_adapter(["scripted"], model)
    return app, model


def scripted_agent(app: App, provider: str = "scripted") -> Any:
    """Agent ``a`` of ``app`` on ``provider`` (the scripted one unless told)."""
    return app.ctx.agent_loop.create("a", AgentOptions(provider=provider, model="m"))


@dataclass
class Asking:
    """An agent whose tool calls each ask a person, shown in ``view``; ``asked`` is set while
    a call waits (clear it to wait for the next)."""

    app: App
    agent: Any
    view: AgentView
    approval: WidgetApproval
    asked: asyncio.Event


async def asking_view(script: list[Any], *tools: Any) -> Asking:
    """Register ``tools``, make every call ask (reason ``risky``), send ``go`` and return once
    the first call waits for approval."""
    app, _ = scripted_app(script)
    approval = WidgetApproval(timeout=30)
    app.ctx.provide("approval", approval)
    for body in tools:
        app.ctx.tools.register(body)
    app.ctx.on("tools/pre-execute", lambda execution, next: Ask(reason="risky"))
    agent = scripted_agent(app)
    view = AgentView(agent)
    asked = asyncio.Event()
    approval.subscribe(lambda: asked.set() if approval.pending else None)
    agent.followup("go")
    await asked.wait()
    return Asking(app, agent, view, approval, asked)

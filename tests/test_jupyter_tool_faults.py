"""In a REAL kernel of this venv: a tool that raises ``SystemExit`` (async or sync), like one
that runs argparse, becomes a tool error and the kernel keeps answering cells."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _kernel_helpers import run_code, running_kernel

import agentloop_nb

pytestmark = pytest.mark.kernel

EXT = "agentloop_nb" if hasattr(agentloop_nb, "load_ipython_extension") else "agentloop_nb.jupyter"
CELL_TIMEOUT = 20


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Any]:
    with running_kernel(tmp_path) as (km, kc):
        yield km, kc


def run(kc: Any, code: str, timeout: float = CELL_TIMEOUT) -> tuple[dict[str, Any], str]:
    """Execute ``code``; the shell reply's content and the cell's stdout."""
    return run_code(kc, code, timeout)


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_a_tool_raising_system_exit_leaves_the_kernel_answering_the_next_cell(
    kernel: Any, kind: str
) -> None:
    km, kc = kernel
    definition = "async def argv_tool() -> str:" if kind == "async" else "def argv_tool() -> str:"
    reply, _ = run(
        kc,
        f"""
        %load_ext {EXT}
        import asyncio
        from agentloop_nb.testing import ScriptedModel, combine, text, tool_call
        from agentloop_nb.tools import tool
        @tool
        {definition}
            '''Parse arguments like a command-line tool.'''
            import argparse
            argparse.ArgumentParser(prog="t").parse_args(["--no-such-flag"])
            return "parsed"
        _ = ctx.tools.register(argv_tool)
        model = ScriptedModel([tool_call("c1", "argv_tool", {{}}), text("after")])
        _ = ctx.llm.register_adapter(["scripted"], model)
        %agent create a --provider scripted --model m
        a.followup("go")
        """,
    )
    assert reply["status"] == "ok", reply
    reply, out = run(
        kc,
        """
        await asyncio.wait_for(a.when_idle(), 10)
        result = [e.data for e in a.session.events if e.type == "tool/result"][0]
        print(result["error"]["code"], "SystemExit" in result["error"]["message"])
        print([e.data["reason"]["kind"] for e in a.session.events if e.type == "turn/end"])
        print(any(m.role == "tool" for m in model.requests[1].messages))
        """,
    )
    assert reply["status"] == "ok", reply
    assert out.splitlines() == ["TOOL_ERROR True", "['completed']", "True"]
    assert km.is_alive()
    reply, out = run(kc, "print('still answering')", timeout=1.0)
    assert reply["status"] == "ok" and out.strip() == "still answering"

"""Fix with agent, undo and why in a REAL kernel over jupyter_client: execute requests carry
a ``cellId`` in their metadata as JupyterLab sends it, so the autopsy is keyed by the cell's id;
what the user sees of the error (the error reply and its traceback) is unchanged."""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _kernel_helpers import running_kernel

pytestmark = pytest.mark.kernel

TIMEOUT = 30


class _Kernel:
    def __init__(self, km: Any, kc: Any) -> None:
        self.km, self.kc = km, kc

    def run(self, code: str, cell_id: str | None = None) -> tuple[dict[str, Any], str, list[Any]]:
        """Execute ``code`` as a notebook front end would (``cellId`` in the metadata);
        returns the reply content, the stdout text and the error outputs."""
        kc = self.kc
        msg = kc.session.msg(
            "execute_request",
            {
                "code": textwrap.dedent(code).strip(),
                "silent": False,
                "store_history": True,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": False,
            },
        )
        if cell_id is not None:
            msg["metadata"]["cellId"] = cell_id
        kc.shell_channel.send(msg)
        out: list[str] = []
        errors: list[Any] = []
        while True:
            m = kc.get_iopub_msg(timeout=TIMEOUT)
            if m["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
                continue
            kind, content = m["msg_type"], m["content"]
            if kind == "stream" and content["name"] == "stdout":
                out.append(content["text"])
            elif kind == "error":
                errors.append(content)
            elif kind == "status" and content["execution_state"] == "idle":
                break
        while True:
            reply = kc.get_shell_msg(timeout=TIMEOUT)
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                return reply["content"], "".join(out), errors


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[_Kernel]:
    with running_kernel(tmp_path, ready_timeout=TIMEOUT) as (km, kc):
        k = _Kernel(km, kc)
        reply, _, _ = k.run("""
            %load_ext agentloop_nb
            import asyncio
            from agentloop_nb.jupyter._state import state
            from agentloop_nb.llm.offline import OfflineModel
            _ = ctx.llm.register_adapter(["quick"], OfflineModel(token_delay=0))
            %agent create bob --kernel --run always --provider quick --model m
        """)
        assert reply["status"] == "ok", reply
        yield k


def test_a_failed_cell_is_fixed_by_the_offline_agent_and_its_autopsy_goes_when_it_succeeds(
    kernel: _Kernel,
) -> None:
    cell = f"cell-{uuid.uuid4().hex[:8]}"
    kernel.run("import pandas as pd\nsales = pd.DataFrame({'units': [3, 5, 7]})", "c-setup")
    reply, _, errors = kernel.run("total = sale['units'].sum()", cell)
    # What the user sees is IPython's own error display, unchanged.
    assert reply["status"] == "error" and reply["ename"] == "NameError"
    assert errors and errors[0]["ename"] == "NameError"
    assert any("sale" in line for line in errors[0]["traceback"])

    reply, out, _ = kernel.run(f"""
        autopsy = state().memory.autopsy({cell!r})
        print(autopsy.cell_id, autopsy.execution_count is not None)
        print(autopsy.missing.line())
        %agent fix bob
        await asyncio.wait_for(bob.when_idle(), 20)
        print(total)
        print(bob.session.derive_messages()[1].text.splitlines()[0])
    """)
    assert reply["status"] == "ok", reply
    lines = out.strip().splitlines()
    assert lines[0] == f"{cell} True"
    assert lines[1] == "missing: name 'sale' — not among the live names; closest: 'sales'"
    assert lines[-2] == "15"
    assert (
        lines[-1]
        == "The name 'sale' does not exist; the closest among the live names is 'sales'. Corrected cell:"
    )

    reply, _, _ = kernel.run("total = sales['units'].sum()", cell)  # the user fixes the cell
    assert reply["status"] == "ok"
    reply, out, _ = kernel.run(f"print(state().memory.autopsy({cell!r}))")
    assert out.strip() == "None"


def test_undo_and_why_in_a_kernel(kernel: _Kernel) -> None:
    reply, _, _ = kernel.run("scores = [4, 1, 3]", "c-scores")
    count = reply["execution_count"]
    reply, out, _ = kernel.run("""
        bob.followup("run: scores = sorted(scores)\\nbest = scores[-1]")
        await asyncio.wait_for(bob.when_idle(), 20)
        print(scores, best)
        %agent why scores
        %agent undo bob
        print(scores, "best" in globals())
    """)
    assert reply["status"] == "ok", reply
    lines = out.strip().splitlines()
    assert lines[0] == "[1, 3, 4] 4"
    assert lines[1] == (
        "scores: rebound by agent bob, turn 1, call offline-2: `scores = sorted(scores)`; "
        f"created by cell [{count}] (id c-scores): `scores = [4, 1, 3]`"
    )
    assert lines[2] == "undid 1 run(s) of bob (run_python offline-2):"
    assert sorted(lines[3:5]) == ["  best: removed", "  scores: restored"]
    assert lines[5] == "[4, 1, 3] False"
    # The cell that awaited the agent and ran the undo is not credited with their bindings.
    reply, out, _ = kernel.run("%agent why scores")
    assert out.strip() == (
        "scores: restored by undo of agent bob's run offline-2; "
        "rebound by agent bob, turn 1, call offline-2: `scores = sorted(scores)`; "
        f"created by cell [{count}] (id c-scores): `scores = [4, 1, 3]`"
    )

"""The Agents panel's actions over a REAL kernel's comm: a stand-in front end (the one of
test_notebook_bridge.py) opens ``agentloop.notebook`` after ``%load_ext agentloop_nb`` and sends
``list``, ``create``, ``prompt`` and ``cancel`` exactly as the JupyterLab panel does; the kernel
pushes ``agents`` messages and the agent's log holds the prompt. Comm handlers run inside the
kernel's shell dispatch, so this is where "no running loop" or output leaking into a cell would
show."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import start_new_kernel
from test_notebook_bridge import FrontEnd

pytestmark = pytest.mark.kernel


@pytest.fixture
def fe(tmp_path: Path) -> Iterator[FrontEnd]:
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    front = FrontEnd(km, kc)
    try:
        front.run(
            "%load_ext agentloop_nb\n"
            "from agentloop_nb.jupyter._state import state as agentloop_nb_state"
        )
        yield front
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def pushes(fe: FrontEnd, comm_id: str) -> list[list[dict[str, Any]]]:
    return [m["agents"] for m in fe.sent_to(comm_id) if m.get("type") == "agents"]


def action(fe: FrontEnd, comm_id: str, **fields: Any) -> None:
    fe.send(comm_id, {"type": "action", **fields})


def test_a_front_end_lists_creates_prompts_and_cancels_over_the_comm(fe: FrontEnd) -> None:
    comm_id = fe.hello("work.ipynb")
    assert fe.run("print(agentloop_nb_state().notebook.connected)") == "True\n"
    action(fe, comm_id, action="list")
    fe.run("pass")  # the kernel handles comm messages in order: the list is answered by now
    assert pushes(fe, comm_id) == [[]]

    action(fe, comm_id, action="create")
    fe.run("import asyncio; await asyncio.sleep(0)")  # let the coalesced push go out
    (row,) = pushes(fe, comm_id)[-1]
    assert (row["name"], row["state"], row["model"], row["turns"]) == (
        "agent",
        "idle",
        "offline/demo",
        0,
    )
    view_id = fe.run("import agentloop_nb.jupyter as J; print(J.view(agent).model_id)").strip()
    assert row["view"] == view_id

    ref = {"cell_id": "c1", "position": 1, "lines": [1, 1], "text": "x = 1"}
    action(fe, comm_id, action="prompt", agent="agent", text="hello", refs=[ref])
    out = fe.run(
        """
        import asyncio, json
        await asyncio.wait_for(agent.when_idle(), 30)
        print(json.dumps([e.data["message"]["content"] for e in agent.session.events
                          if e.type == "user/message"]))
        """
    )
    (content,) = json.loads(out)
    assert [b["text"] for b in content][1] == "hello"
    assert content[0]["text"].startswith("The user selected this in cell 1 (id c1), line 1")
    assert pushes(fe, comm_id)[-1][0]["turns"] == 1  # the turn's end was pushed

    fe.run(
        "from agentloop_nb.testing import HANG, ScriptedModel\n"
        "ctx.llm.register_adapter(['stuck'], ScriptedModel([HANG]))"
    )
    fe.run("%agent create stuck --provider stuck --model m")
    action(fe, comm_id, action="prompt", agent="stuck", mode="followup", text="wait")
    assert fe.run("print(stuck.status)") == "running\n"
    action(fe, comm_id, action="cancel", agent="stuck")
    out = fe.run(
        """
        await asyncio.wait_for(stuck.when_idle(), 30)
        print([e.data["reason"]["kind"] for e in stuck.session.events if e.type == "turn/end"])
        """
    )
    assert out == "['aborted']\n"
    assert not fe.stderr, fe.stderr  # nothing the actions did leaked into a cell


def row_of(fe: FrontEnd, comm_id: str, name: str) -> dict[str, Any] | None:
    """Agent ``name``'s row in the kernel's last ``agents`` push (``None``: not in it)."""
    rows = pushes(fe, comm_id)
    return next((r for r in rows[-1] if r["name"] == name), None) if rows else None


def test_actions_that_arrive_on_a_kernel_subshell_run_on_the_kernels_own_loop(
    fe: FrontEnd,
) -> None:
    # JupyterLab 4.4+ sends a comm target's messages to a subshell of its own, which ipykernel
    # 7 runs on another thread with another event loop: an agent created or prompted from there
    # must still run on the loop the notebook's cells await. Messages on a subshell are not
    # ordered with the main shell's cells, so the test follows the kernel's pushes (each
    # `fe.run` is one round trip that reads them), as the panel does.
    fe.use_subshell()
    comm_id = fe.hello("work.ipynb")
    # The front end talks once welcomed (before that, ipykernel's router may look the comm up
    # while the subshell has not opened it yet, and warns "No such comm" into a cell).
    while not any(m.get("type") == "welcome" for m in fe.sent_to(comm_id)):
        fe.run("pass")
    fe.run(
        "from agentloop_nb.testing import HANG, ScriptedModel\n"
        "ctx.llm.register_adapter(['stuck'], ScriptedModel([HANG]))"
    )
    fe.run("%agent create stuck --provider stuck --model m")
    action(fe, comm_id, action="create")
    while row_of(fe, comm_id, "agent") is None:
        fe.run("pass")
    action(fe, comm_id, action="prompt", agent="stuck", mode="followup", text="wait")
    action(fe, comm_id, action="prompt", agent="agent", text="hello")
    while (stuck := row_of(fe, comm_id, "stuck")) is None or stuck["state"] != "running":
        fe.run("pass")
    while (agent := row_of(fe, comm_id, "agent")) is None or (agent["turns"], agent["state"]) != (
        1,
        "idle",
    ):
        fe.run("pass")
    out = fe.run(
        "import asyncio\n"
        "print(stuck.status, stuck._state.task.get_loop() is asyncio.get_running_loop())"
    )
    assert out == "running True\n"
    action(fe, comm_id, action="cancel", agent="stuck")
    out = fe.run(
        """
        await asyncio.wait_for(stuck.when_idle(), 30)
        print([e.data["reason"]["kind"] for e in stuck.session.events if e.type == "turn/end"],
              [e.data["reason"]["kind"] for e in agent.session.events if e.type == "turn/end"])
        """
    )
    assert out == "['aborted'] ['completed']\n"
    assert not fe.stderr, fe.stderr

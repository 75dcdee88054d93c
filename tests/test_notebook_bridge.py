"""The kernel end of the notebook bridge (``agentloop_nb.jupyter.notebook.NotebookBridge``) in
a REAL ipykernel, driven over jupyter_client by a stand-in front end that speaks the wire
contract of docs/notebook-bridge.md: it opens comms, answers requests, sends actions and
garbage. The JupyterLab extension's half is tested in tests/browser/test_notebook_bridge.py."""

from __future__ import annotations

import json
import queue
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager, start_new_kernel

pytestmark = pytest.mark.kernel

Responder = Callable[[str, dict[str, Any]], "dict[str, Any] | None"]

SETUP = """
import asyncio, json, logging
from agentloop_nb.jupyter.notebook import BridgeError, NotebookBridge
class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []
    def emit(self, record):
        self.lines.append(record.getMessage())
records = _Records()
logging.getLogger("agentloop_nb.notebook").addHandler(records)
actions = []
"""


class FrontEnd:
    """A kernel plus a stand-in for the JupyterLab extension on the other end of its comms."""

    def __init__(self, km: KernelManager, kc: BlockingKernelClient) -> None:
        self.km, self.kc = km, kc
        self.comm_log: list[dict[str, Any]] = []  # every comm_* message the kernel published
        self.closed: set[str] = set()
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.stderr: list[str] = []
        self.subshell: str | None = None  # set by use_subshell(): where comm messages go

    # -- the front end's side of the comm ---------------------------------------------------

    def use_subshell(self) -> str:
        """Send every later comm message to a new kernel subshell, as JupyterLab 4.4+ does
        (its default ``commsOverSubshells`` is one subshell per comm target)."""
        request = self.kc.session.msg("create_subshell_request", {})
        self.kc.control_channel.send(request)
        while True:
            reply = self.kc.get_control_msg(timeout=10)
            if reply["parent_header"].get("msg_id") == request["header"]["msg_id"]:
                break
        assert reply["content"]["status"] == "ok", reply["content"]
        self.subshell = str(reply["content"]["subshell_id"])
        return self.subshell

    def open(self, data: dict[str, Any]) -> str:
        comm_id = uuid.uuid4().hex
        self._shell(
            "comm_open", {"comm_id": comm_id, "target_name": "agentloop.notebook", "data": data}
        )
        return comm_id

    def hello(self, path: str = "notebooks/x.ipynb") -> str:
        return self.open({"type": "hello", "protocol": 1, "path": path, "client": "test"})

    def send(self, comm_id: str, data: Any) -> None:
        self._shell("comm_msg", {"comm_id": comm_id, "data": data})

    def close(self, comm_id: str) -> None:
        self._shell("comm_close", {"comm_id": comm_id, "data": {}})

    def _shell(self, msg_type: str, content: dict[str, Any]) -> None:
        msg = self.kc.session.msg(msg_type, content)
        if self.subshell is not None:
            msg["header"]["subshell_id"] = self.subshell
        self.kc.shell_channel.send(msg)

    def comm_info(self, target: str) -> dict[str, Any]:
        msg_id = self.kc.comm_info(target_name=target)
        while True:
            reply = self.kc.get_shell_msg(timeout=10)
            if reply["parent_header"].get("msg_id") == msg_id:
                return dict(reply["content"]["comms"])

    # -- the kernel's side ------------------------------------------------------------------

    def run(
        self,
        code: str,
        *,
        answer: Responder | None = None,
        timeout: float = 20,
        cell_id: str | None = None,
    ) -> str:
        """Execute ``code`` (as cell ``cell_id``: JupyterLab's ``cellId`` metadata); answer
        comm requests with ``answer(op, args)`` meanwhile (a dict is the result, ``None``
        sends nothing). Returns stdout; fails on a cell error."""
        request = self.kc.session.msg(
            "execute_request",
            {
                "code": textwrap.dedent(code),
                "silent": False,
                "store_history": True,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": False,  # a failing cell must not abort the next one
            },
        )
        if cell_id is not None:
            request["metadata"]["cellId"] = cell_id
        self.kc.shell_channel.send(request)
        msg_id = request["header"]["msg_id"]
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"cell did not finish in {timeout}s; stdout: {''.join(out)}"
                ) from None
            kind, content = msg["msg_type"], msg["content"]
            parent = msg["parent_header"].get("msg_id")
            if kind.startswith("comm_"):
                self._on_comm(kind, content, answer)
            elif kind == "stream" and content["name"] == "stderr":
                self.stderr.append(content["text"])
            elif parent == msg_id and kind == "stream":
                out.append(content["text"])
            elif parent == msg_id and kind == "error":
                raise AssertionError("\n".join(content["traceback"]))
            elif parent == msg_id and kind == "status" and content["execution_state"] == "idle":
                return "".join(out)

    def _on_comm(self, kind: str, content: dict[str, Any], answer: Responder | None) -> None:
        self.comm_log.append({"kind": kind, **content})
        if kind == "comm_close":
            self.closed.add(content["comm_id"])
        data = content.get("data") or {}
        if kind == "comm_msg" and data.get("type") == "request":
            self.requests.append((content["comm_id"], data))
            result = answer(data["op"], data["args"]) if answer else None
            if result is not None:
                reply = {"type": "response", "id": data["id"], **result}
                self.send(content["comm_id"], reply)

    def sent_to(self, comm_id: str) -> list[dict[str, Any]]:
        return [
            m["data"] for m in self.comm_log if m["kind"] == "comm_msg" and m["comm_id"] == comm_id
        ]


def ok(result: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "result": result}


CELL = {
    "id": "c1",
    "cell_type": "code",
    "source": "1 + 1",
    "outputs": [],
    "execution_count": 1,
    "metadata": {},
    "state": "idle",
    "editing": False,
}


@pytest.fixture(scope="module")
def kernel() -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@pytest.fixture
def fe(kernel: tuple[KernelManager, BlockingKernelClient]) -> Iterator[FrontEnd]:
    """A fresh bridge (``bridge`` in the kernel) and a front end that has not connected."""
    front = FrontEnd(*kernel)
    front.run(SETUP + "\nbridge = NotebookBridge(get_ipython().kernel)\n")
    try:
        yield front
    finally:
        front.run("bridge.close()")
        assert not front.stderr, f"the kernel wrote to stderr: {front.stderr}"


def connected(fe: FrontEnd, path: str = "notebooks/x.ipynb") -> str:
    comm_id = fe.hello(path)
    assert fe.run("print(bridge.connected, bridge.path)") == f"True {path}\n"
    return comm_id


def test_bridge_announces_itself_on_a_comm_later_pages_can_probe_for(fe: FrontEnd) -> None:
    announces = [m for m in fe.comm_log if m["kind"] == "comm_open"]
    assert [(m["target_name"], m["data"]) for m in announces] == [
        ("agentloop.notebook.ready", {"type": "ready", "protocol": 1})
    ]
    probe = fe.comm_info("agentloop.notebook.ready")
    assert announces[0]["comm_id"] in probe
    fe.run("bridge.close()")
    assert announces[0]["comm_id"] in fe.closed
    assert fe.comm_info("agentloop.notebook.ready") == {}
    fe.run("bridge = NotebookBridge(get_ipython().kernel)")  # for the fixture's teardown


def test_hello_is_welcomed_and_names_the_notebook(fe: FrontEnd) -> None:
    assert fe.run("print(bridge.connected, bridge.path)") == "False None\n"
    comm_id = connected(fe, "work/analysis.ipynb")
    welcome = fe.sent_to(comm_id)[0]
    assert welcome["type"] == "welcome" and welcome["protocol"] == 1
    assert isinstance(welcome["kernel"], str)


def test_a_front_end_of_another_protocol_is_refused_and_closed(fe: FrontEnd) -> None:
    comm_id = fe.open({"type": "hello", "protocol": 99, "path": "x.ipynb"})
    assert fe.run("print(bridge.connected)") == "False\n"
    (refused,) = fe.sent_to(comm_id)
    assert refused["type"] == "refused" and "protocol 1" in refused["reason"]
    assert comm_id in fe.closed
    bad = fe.open({"type": "hello", "path": 3})
    assert fe.run("print(bridge.connected); print(records.lines[-1])").startswith(
        "False\nnotebook bridge: refused a comm with a bad hello"
    )
    assert bad in fe.closed


def test_request_returns_the_front_ends_validated_result(fe: FrontEnd) -> None:
    connected(fe)
    out = fe.run(
        """
        r = await bridge.request("snapshot", {})
        print(r["path"], [c["id"] for c in r["cells"]], r["cells"][0]["state"])
        """,
        answer=lambda op, args: ok({"path": "notebooks/x.ipynb", "cells": [CELL]}),
    )
    assert out == "notebooks/x.ipynb ['c1'] idle\n"
    ((_, request),) = fe.requests
    assert request["op"] == "snapshot" and request["args"] == {}


def test_an_error_response_raises_bridge_error_with_its_code(fe: FrontEnd) -> None:
    connected(fe)
    out = fe.run(
        """
        try:
            await bridge.request("replace", {"id": "c1", "expected_source": "a", "source": "b"})
        except BridgeError as e:
            print(e.code, "|", e.message)
        """,
        answer=lambda op, args: {
            "ok": False,
            "error": {"code": "conflict", "message": "the user is typing in cell c1"},
        },
    )
    assert out == "conflict | the user is typing in cell c1\n"


def test_a_malformed_result_is_an_internal_error_not_a_crash(fe: FrontEnd) -> None:
    connected(fe)
    out = fe.run(
        """
        try:
            await bridge.request("insert", {"index": 0, "source": "x"})
        except BridgeError as e:
            print(e.code, "|", e.message)
        print(records.lines[-1])
        """,
        answer=lambda op, args: ok({"cell": {"id": 5}}),
    )
    assert out.startswith("internal | the front end sent a malformed 'insert' result\n")
    assert "notebook bridge: malformed 'insert' result" in out


def test_requests_go_to_the_most_recent_live_comm_and_closed_ones_are_forgotten(
    fe: FrontEnd,
) -> None:
    first = connected(fe, "a.ipynb")
    second = connected(fe, "b.ipynb")
    answer = lambda op, args: ok({})  # noqa: E731
    fe.run('await bridge.request("delete", {"id": "c1", "expected_source": ""})', answer=answer)
    fe.close(second)
    assert fe.run("print(bridge.path)") == "a.ipynb\n"
    fe.run('await bridge.request("delete", {"id": "c1", "expected_source": ""})', answer=answer)
    assert [comm for comm, _ in fe.requests] == [second, first]
    fe.close(first)
    out = fe.run(
        """
        try:
            await bridge.request("snapshot", {})
        except BridgeError as e:
            print(e.code, "|", e.message)
        """
    )
    assert out.startswith("disconnected | no notebook front end is connected")


def test_a_comm_closing_mid_request_fails_it_as_disconnected(fe: FrontEnd) -> None:
    comm_id = connected(fe)

    def close_instead(op: str, args: dict[str, Any]) -> None:
        fe.close(comm_id)

    out = fe.run(
        """
        try:
            await bridge.request("replace", {"id": "c1", "expected_source": "", "source": "x"})
        except BridgeError as e:
            print(e.code, "|", e.message)
        """,
        answer=close_instead,
    )
    assert out.startswith("disconnected | the notebook front end closed before answering 'replace'")


def test_an_unanswered_request_times_out_and_its_late_answer_is_dropped(fe: FrontEnd) -> None:
    comm_id = connected(fe)
    out = fe.run(
        """
        try:
            await bridge.request("snapshot", {}, timeout=0.3)
        except BridgeError as e:
            print(e.code, "|", e.message)
        """
    )
    assert out == "timeout | the notebook front end did not answer 'snapshot' within 0.3 s\n"
    ((_, request),) = fe.requests
    fe.send(comm_id, {"type": "response", "id": request["id"], "ok": True, "result": {}})
    assert "stale or unknown response" in fe.run("print(records.lines[-1])")


def test_a_run_request_waits_longer_than_the_cells_own_timeout(fe: FrontEnd) -> None:
    connected(fe)
    # A run of 2 s answered after the default 10 s? No: the answer comes at once, but the
    # request's deadline must cover the cell's timeout (checked through a 0.1 s caller timeout).
    out = fe.run(
        """
        r = await bridge.request("run", {"id": "c1", "timeout": 2}, timeout=0.1)
        print(r["finished"])
        """,
        answer=lambda op, args: ok({"cell": CELL, "finished": True}),
    )
    assert out == "True\n"


def test_actions_reach_listeners_validated_and_stop_after_dispose(fe: FrontEnd) -> None:
    comm_id = connected(fe)
    fe.run("off = bridge.on_action(actions.append)")
    fe.send(comm_id, {"type": "action", "action": "fix", "cell_id": "c9", "agent": ""})
    fe.send(
        comm_id,
        {
            "type": "action",
            "action": "prompt",
            "agent": "a",
            "text": "hi",
            "refs": [{"cell_id": "c1", "position": 1, "lines": [1, 2]}],
        },
    )
    fe.send(comm_id, {"type": "action", "action": "list"})
    out = fe.run(
        "print([(type(a).__name__, a.action) for a in actions]); print(actions[1].refs[0].lines)"
    )
    assert (
        out
        == "[('FixAction', 'fix'), ('PromptAction', 'prompt'), ('ListAction', 'list')]\n(1, 2)\n"
    )
    fe.run("off()")
    fe.send(comm_id, {"type": "action", "action": "cancel", "agent": "a"})
    assert fe.run("print(len(actions))") == "3\n"


def test_malformed_messages_are_dropped_with_a_logged_reason(fe: FrontEnd) -> None:
    comm_id = connected(fe)
    fe.run("off = bridge.on_action(actions.append); seen = len(records.lines)")
    fe.send(comm_id, {"type": "gossip"})
    fe.send(comm_id, {"type": "action", "action": "fix"})  # no cell_id
    fe.send(comm_id, {"type": "action", "action": "explode"})
    fe.send(comm_id, ["not", "an", "object"])
    fe.send(comm_id, {"type": "action", "action": "fix", "cell_id": "x" * (11 * 1024 * 1024)})
    out = fe.run("print(len(actions)); print(json.dumps(records.lines[seen:]))", timeout=40)
    count, lines = out.split("\n", 1)
    assert count == "0"
    reasons = json.loads(lines)
    assert len(reasons) == 5, reasons
    assert all(r.startswith("notebook bridge: dropped a malformed message") for r in reasons[:4])
    assert "cell_id" in reasons[1] and "gossip" in reasons[0]
    assert reasons[4].startswith("notebook bridge: dropped a message over 10485760 bytes")


def test_a_flood_over_the_rate_limit_is_cut_with_one_log_line(fe: FrontEnd) -> None:
    fe.run(
        "bridge.close(); bridge = NotebookBridge(get_ipython().kernel, max_messages_per_second=5)"
    )
    comm_id = connected(fe)
    fe.run("off = bridge.on_action(actions.append); seen = len(records.lines)")
    for i in range(40):
        fe.send(comm_id, {"type": "action", "action": "fix", "cell_id": f"c{i}"})
    out = fe.run("print(len(actions)); print(json.dumps(records.lines[seen:]))")
    count, lines = out.split("\n", 1)
    # 5 a second: 40 messages handled in well under the 8 s they would need unthrottled.
    assert 5 <= int(count) <= 15, count
    floods = [line for line in json.loads(lines) if "messages in a second" in line]
    assert 1 <= len(floods) <= 3 and "over 5 messages" in floods[0]


def test_push_reaches_every_live_comm(fe: FrontEnd) -> None:
    a, b = connected(fe, "a.ipynb"), connected(fe, "b.ipynb")
    fe.run('bridge.push({"type": "agents", "agents": [{"name": "a", "state": "idle"}]})')
    fe.run("print('flush')")  # the push above is published before this cell's idle
    for comm_id in (a, b):
        assert fe.sent_to(comm_id)[-1] == {
            "type": "agents",
            "agents": [{"name": "a", "state": "idle"}],
        }
    out = fe.run(
        """
        try:
            bridge.push({"agents": []})
        except ValueError as e:
            print(e)
        """
    )
    assert out == "a pushed message must be a dict with a string 'type'\n"


def test_load_ext_registers_the_bridge_and_unload_closes_it(fe: FrontEnd) -> None:
    fe.run("bridge.close()")
    before = len(fe.comm_log)
    fe.run("%load_ext agentloop_nb")
    opened = [m for m in fe.comm_log[before:] if m["kind"] == "comm_open"]
    assert [m["target_name"] for m in opened] == ["agentloop.notebook.ready"]
    comm_id = fe.hello("loaded.ipynb")
    out = fe.run(
        """
        from agentloop_nb.jupyter._state import state
        bridge = state().notebook
        print(bridge.connected, bridge.path)
        """
    )
    assert out == "True loaded.ipynb\n"
    fe.run("%unload_ext agentloop_nb\nimport agentloop_nb.jupyter as J\nawait J.wait_closed()")
    assert comm_id in fe.closed and opened[0]["comm_id"] in fe.closed
    fe.run("bridge = NotebookBridge(get_ipython().kernel)")


def test_a_fix_click_starts_the_fix_and_the_page_is_told_who_took_it(fe: FrontEnd) -> None:
    fe.run("bridge.close()")
    fe.run("%load_ext agentloop_nb")
    comm_id = fe.hello("fix.ipynb")
    with pytest.raises(AssertionError, match="NameError"):
        fe.run("sales = [1, 2]\nprint(sum(sale))", cell_id="c-typo")
    for cell in ("c-typo", "c-never-failed"):
        fe.send(comm_id, {"type": "action", "action": "fix", "cell_id": cell, "agent": ""})
    out = fe.run(
        """
        from agentloop_nb.jupyter._state import state
        fixer = state().agent("fixer")
        print(fixer.session.derive_messages()[0].content[0].text.splitlines()[0])
        """
    )
    assert out.startswith("Error autopsy of cell [")
    notices = [m for m in fe.sent_to(comm_id) if m.get("type") == "notice"]
    assert [(n["cell_id"], n["level"]) for n in notices] == [
        ("c-typo", "info"),
        ("c-never-failed", "error"),
    ]
    assert notices[0]["text"].startswith("created agent fixer (offline/demo")
    assert "no failure is kept for cell 'c-never-failed'" in notices[1]["text"]
    fe.run("%unload_ext agentloop_nb\nimport agentloop_nb.jupyter as J\nawait J.wait_closed()")
    fe.run("bridge = NotebookBridge(get_ipython().kernel)")

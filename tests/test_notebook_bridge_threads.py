"""The notebook bridge's comm callbacks arriving on another thread (a kernel subshell), in
process: a real ``comm.base_comm.CommManager`` and comms that record what they publish. The
whole path through a real ipykernel subshell is in tests/test_agents_panel_kernel.py; this
file pins the ordering a real kernel cannot be made to hit on demand."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from comm.base_comm import BaseComm, CommManager

from agentloop_nb.jupyter.notebook import COMM_TARGET, NotebookBridge

HELLO = {"type": "hello", "protocol": 1, "path": "notebooks/x.ipynb", "client": "test"}


class RecordingComm(BaseComm):
    """A comm that keeps what it would have published (no kernel to publish on)."""

    def __init__(self, **kwargs: Any) -> None:
        self.published: list[tuple[str, Any]] = []
        super().__init__(**kwargs)

    def publish_msg(self, msg_type: str, data: Any = None, *args: Any, **kwargs: Any) -> None:
        self.published.append((msg_type, data))


def open_from_another_thread(manager: CommManager) -> RecordingComm:
    """What ipykernel does when a comm open arrives on a subshell: the target's callback runs
    on the subshell's thread."""
    comm = RecordingComm(target_name=COMM_TARGET, primary=False)
    msg = {"content": {"comm_id": comm.comm_id, "target_name": COMM_TARGET, "data": HELLO}}
    opener = threading.Thread(target=manager.targets[COMM_TARGET], args=(comm, msg))
    opener.start()
    opener.join()
    return comm


async def hopped() -> None:
    """Return once the callbacks other threads handed to this loop before now have run."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.call_soon_threadsafe(done.set_result, None)
    await done


@pytest.mark.anyio
async def test_a_front_end_opening_from_another_thread_is_welcomed_on_the_bridges_loop() -> None:
    manager = CommManager()
    bridge = NotebookBridge(manager)
    comm = open_from_another_thread(manager)
    assert not bridge.connected  # not adopted on the subshell's thread
    await hopped()
    assert bridge.connected
    assert bridge.path == "notebooks/x.ipynb"
    assert [d["type"] for kind, d in comm.published if kind == "comm_msg"] == ["welcome"]
    bridge.close()


@pytest.mark.anyio
async def test_a_front_end_whose_open_arrives_as_the_bridge_closes_is_closed_not_adopted() -> None:
    manager = CommManager()
    bridge = NotebookBridge(manager)
    comm = open_from_another_thread(manager)  # its welcome waits for the bridge's loop
    bridge.close()
    await hopped()
    assert not bridge.connected
    assert [kind for kind, _ in comm.published] == ["comm_close"]

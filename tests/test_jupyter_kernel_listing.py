"""What the kernel tools show of the user's namespace and history (a stand-in shell: the
namespace and the history manager are plain data here; the real-kernel runs are in
test_jupyter_kernel_tools)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import agentloop_nb
from agentloop_nb.jupyter.kernel import user_variables
from agentloop_nb.jupyter.kernel._tools import _Tools


def _shell(user_ns: dict[str, Any], raw: list[str] | None = None) -> Any:
    history = SimpleNamespace(input_hist_raw=raw) if raw is not None else None
    return SimpleNamespace(user_ns=user_ns, user_ns_hidden={}, history_manager=history)


def test_list_variables_leaves_out_names_imported_from_agentloop_nb() -> None:
    def mine(x: int) -> int:
        return x

    class Local:
        pass

    ns = {
        "tool": agentloop_nb.tool,
        "Agent": getattr(agentloop_nb, "Agent", agentloop_nb.tool),
        "mine": mine,
        "Local": Local,
        "n": 3,
        "print_": print,
    }
    kept = user_variables(_shell(ns))
    assert sorted(kept) == ["Local", "mine", "n", "print_"]
    listing = _Tools(_shell(ns), 2000).list_variables()
    assert "tool" not in listing.split(":")[0] and "\ntool:" not in listing


def test_notebook_history_shows_what_the_user_typed() -> None:
    parsed = ["", "get_ipython().run_cell_magic('agent', 'analyst', 'variables\\n')\n"]
    typed = ["", "%%agent analyst\nvariables\n"]
    history = _Tools(_shell({"In": parsed, "Out": {}}, typed), 2000).notebook_history()
    assert history == "[1] In:\n%%agent analyst\nvariables"
    # Without a history manager that lines up, In is what there is.
    fallback = _Tools(_shell({"In": parsed, "Out": {}}, ["x"]), 2000).notebook_history()
    assert "run_cell_magic" in fallback

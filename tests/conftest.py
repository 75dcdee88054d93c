from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from _realmodel import realmodel_url  # noqa: F401  (fixture: the llama-server URL)


@pytest.fixture
def anyio_backend() -> str:
    # The kernel runs asyncio; the library is written with anyio but only asyncio is supported.
    return "asyncio"


@pytest.fixture
async def app() -> AsyncIterator[Any]:
    """An ``App`` with the invariant companion loaded (``make_app()``), closed after the test.
    A module that needs another configuration overrides this fixture."""
    from _loop_helpers import make_app  # imported here: collecting must not import the package

    app = make_app()
    yield app
    await app.aclose()


@pytest.fixture
async def shell(tmp_path: Path) -> AsyncIterator[Any]:
    """An in-process IPython shell with the extension loaded (sessions under ``tmp_path``);
    afterwards the extension is unloaded, its agents closed, and the names the test bound in
    the shell's namespace removed (the shell is a process-wide singleton)."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    import agentloop_nb.jupyter as J

    config = Config()
    config.HistoryManager.enabled = False
    sh = InteractiveShell.instance(config=config)
    before = set(sh.user_ns)
    J.configure(persistence_root=tmp_path / "sessions")
    sh.run_line_magic("load_ext", "agentloop_nb.jupyter")
    try:
        yield sh
    finally:
        sh.run_line_magic("unload_ext", "agentloop_nb.jupyter")
        await J.wait_closed()
        J.configure()
        for name in set(sh.user_ns) - before:
            sh.user_ns.pop(name, None)

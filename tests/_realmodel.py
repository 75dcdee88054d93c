"""The real model the `realmodel` tests talk to: llama.cpp's llama-server serving Gemma 3 270M
(a base model) with the tool-calling chat template in tests/realmodel/, started on a loopback
port by scripts/realmodel.sh (run by scripts/test.sh).

``realmodel_url`` (a fixture, re-exported by conftest.py) is the server's base URL without
``/v1``. Tests skip, saying why, only when no server was configured (the script exports the
reason it could not start one in ``AGENTLOOP_REALMODEL_SKIP``); a configured server that does
not answer ``/health`` fails them, so a broken server cannot hide behind a skip.

The model needs help to call tools: :func:`few_shot_seed` logs earlier turns in which the tool
was used, and temperature 0 keeps replies repeatable on one build.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

import httpx
import pytest

URL_ENV = "AGENTLOOP_REALMODEL_URL"
SKIP_ENV = "AGENTLOOP_REALMODEL_SKIP"
PROVIDER = "llamacpp"
#: llama-server serves whatever model it loaded under any name.
MODEL = "gemma-3-270m"


@pytest.fixture(scope="session")
def realmodel_url() -> str:
    """The llama-server base URL (no ``/v1``); skips when none is configured."""
    url = os.environ.get(URL_ENV, "").rstrip("/")
    if not url:
        reason = os.environ.get(SKIP_ENV) or (
            f"no real model: {URL_ENV} is unset (bash scripts/test.sh builds and starts "
            "llama-server; or run `bash scripts/realmodel.sh` and export the URL it prints)"
        )
        pytest.skip(reason)
    try:
        health = httpx.get(url + "/health", timeout=10.0)
    except httpx.HTTPError as exc:
        pytest.fail(f"{URL_ENV}={url} does not answer /health: {exc!r}")
    if health.status_code != 200:
        pytest.fail(f"{URL_ENV}={url} is not ready: /health says {health.status_code}")
    return url


def providers(url: str, **options: Any) -> dict[str, dict[str, Any]]:
    """The provider entry the README shows for llama.cpp, for the server at ``url``."""
    return {PROVIDER: {"type": "openai", "base_url": url + "/v1", **options}}


Example = tuple[str, str, dict[str, Any], str, str]


def few_shot_seed(tool: str, examples: Sequence[Example]) -> list[dict[str, Any]]:
    """Session events for completed turns in which ``tool`` was used: each example is
    ``(question, call_id, arguments, result, answer)``."""
    events: list[dict[str, Any]] = []
    for turn, (question, call_id, arguments, result, answer) in enumerate(examples, start=1):
        events += [
            {"type": "turn/start", "data": {"turn": turn}},
            _user(turn, question),
            _assistant(turn, 1, [_call(call_id, tool, arguments)]),
            {
                "type": "tool/result",
                "data": {
                    "turn": turn,
                    "step": 1,
                    "call_id": call_id,
                    "name": tool,
                    "content": result,
                    "is_error": False,
                },
            },
            _assistant(turn, 2, [{"type": "text", "text": answer}]),
            {"type": "turn/end", "data": {"turn": turn, "reason": {"kind": "completed"}}},
        ]
    return events


def _user(turn: int, text: str) -> dict[str, Any]:
    message = {
        "role": "user",
        "id": f"fewshot-{turn}",
        "content": [{"type": "text", "text": text}],
        "source": {"kind": "user"},
    }
    return {"type": "user/message", "data": {"message": message}}


def _assistant(turn: int, step: int, content: list[dict[str, Any]]) -> dict[str, Any]:
    message = {"role": "assistant", "content": content}
    return {"type": "assistant/message", "data": {"turn": turn, "step": step, "message": message}}


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool-call", "id": call_id, "name": name, "arguments": json.dumps(arguments)}

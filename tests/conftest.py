from __future__ import annotations

import pytest
from _realmodel import realmodel_url  # noqa: F401  (fixture: the llama-server URL)


@pytest.fixture
def anyio_backend() -> str:
    # The kernel runs asyncio; the library is written with anyio but only asyncio is supported.
    return "asyncio"

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    # The kernel runs asyncio; the library is written with anyio but only asyncio is supported.
    return "asyncio"

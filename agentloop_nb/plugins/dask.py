"""Dask tool engine: ``@tool(executor="dask")`` bodies run on a ``distributed.Client``.

``app.ctx.plugin(DaskToolsPlugin)`` (config ``address=None``) publishes the instance as
``ctx.dask``. With an ``address`` the plugin connects to that scheduler; without one it starts a
``LocalCluster(processes=True, threads_per_worker=1, dashboard_address=":0")`` of
``n_workers`` worker processes on first use (not when applied: a notebook that never calls a
Dask tool pays nothing). Disposing the plugin's scope (``app.aclose()``, re-applying the
plugin) closes the client and the cluster it started.

A Dask tool's arguments are validated in the kernel, then the function and its arguments are
pickled (cloudpickle) to a worker, which runs the body and pickles its result back; the result
then goes through the usual result conversion. The body cannot take a ``ToolExecution`` (it runs
in another process). Endings:

- the turn aborts or the call times out: the Dask future is cancelled and the call ends
  ``ABORTED`` (``TOOL_TIMEOUT``), like a local body;
- the worker running the body dies (killed, out of memory): the call ends ``TOOL_ERROR`` with a
  :class:`DaskWorkerLost` message naming the worker's address. The local cluster gives up at the
  first lost worker (``allowed_failures=0``): a body that crashes its process is not retried on
  the next one;
- the body raises: ``TOOL_ERROR`` naming the exception, as for a local body.

``distributed`` is the optional extra ``agentloop_nb[dask]``; without it, the first Dask call
ends ``TOOL_ERROR`` saying so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from uuid import uuid4

import anyio
from pydantic import BaseModel, ConfigDict, Field

from ..errors import AgentloopError, UsageError

if TYPE_CHECKING:
    from ..context import Context

__all__ = ["DaskConfig", "DaskToolsPlugin", "DaskWorkerLost"]

_log = logging.getLogger(__name__)

# Seconds a teardown or a cancel may spend talking to the scheduler before giving up.
_CLOSE_TIMEOUT = 10.0


class DaskConfig(BaseModel):
    """``address``: a scheduler to connect to (``None``: a local cluster started on first use);
    ``n_workers``: the local cluster's worker processes (one thread each)."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = None
    n_workers: int = Field(default=1, ge=1, le=64)


class DaskWorkerLost(AgentloopError):
    """The Dask worker running a tool body died; ``worker`` is its address."""

    def __init__(self, tool: str, worker: str) -> None:
        super().__init__(f"Dask worker {worker} was lost while running tool {tool!r}")
        self.tool = tool
        self.worker = worker


class DaskToolsPlugin:
    """Class plugin; see the module docstring. Named ``dask``: applying it again replaces the
    earlier instance (closing its client and cluster)."""

    name = "dask"
    Config = DaskConfig

    def __init__(self, ctx: Context, config: DaskConfig) -> None:
        self.ctx = ctx
        self.config = config
        self._client: Any = None
        self._cluster: Any = None
        self._starting = anyio.Lock()
        self._closed = False
        ctx.provide("dask", self)

    # -- public -------------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The connected ``distributed.Client``, or ``None`` before first use."""
        return self._client

    @property
    def cluster(self) -> Any:
        """The ``LocalCluster`` this plugin started, or ``None`` (not started, or an address)."""
        return self._cluster

    @property
    def dashboard_link(self) -> str | None:
        """The Dask dashboard's URL once connected (``None`` before)."""
        client = self._client
        return None if client is None else str(client.dashboard_link)

    async def connect(self) -> Any:
        """The client, connecting (or starting the local cluster) on first call.

        Raises ``RuntimeError`` once disposed or when ``distributed`` is not installed; a
        connection failure propagates."""
        if self._client is not None:
            return self._client
        async with self._starting:
            if self._closed:
                raise UsageError("the Dask tools plugin was disposed")
            if self._client is None:
                self._client = await self._start()
        return self._client

    async def submit(self, fn: Callable[..., Any], kwargs: Mapping[str, Any], *, name: str) -> Any:
        """Run ``fn(**kwargs)`` on a worker and return its result.

        Raises what the body raised, :class:`DaskWorkerLost` when its worker died; cancelling
        the caller cancels the Dask future (then re-raises the cancellation)."""
        client = await self.connect()
        future = client.submit(fn, pure=False, key=f"{name}-{uuid4().hex}", **kwargs)
        try:
            return await future
        except Exception as exc:
            lost = _lost_worker(exc)
            if lost is not None:
                raise DaskWorkerLost(name, lost) from exc
            raise
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
                await client.cancel([future])
            raise

    async def dispose(self) -> None:
        """Close the client and the local cluster (if this plugin started them)."""
        async with self._starting:
            self._closed = True
            client, cluster = self._client, self._cluster
            self._client = self._cluster = None
            with anyio.move_on_after(_CLOSE_TIMEOUT):
                if client is not None:
                    await client.close()
                if cluster is not None:
                    await cluster.close()

    # -- internals ----------------------------------------------------------------------------

    async def _start(self) -> Any:
        try:
            from distributed import Client, LocalCluster
        except ImportError as exc:
            raise UsageError(
                "Dask tools need the 'distributed' package: pip install 'agentloop_nb[dask]'"
            ) from exc
        address = self.config.address
        if address is not None:
            return await Client(address, asynchronous=True)
        cluster: Any = await LocalCluster(
            processes=True,
            n_workers=self.config.n_workers,
            threads_per_worker=1,
            dashboard_address=":0",
            asynchronous=True,
            scheduler_kwargs={"allowed_failures": 0},
        )
        try:
            client = await Client(cluster, asynchronous=True)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await cluster.close()
            raise
        self._cluster = cluster
        _log.info("started a local Dask cluster at %s", cluster.scheduler_address)
        return client


def _lost_worker(exc: BaseException) -> str | None:
    """The address of the worker a ``KilledWorker`` names, or ``None`` for other errors."""
    if type(exc).__name__ != "KilledWorker":
        return None
    last = getattr(exc, "last_worker", None)
    address = getattr(last, "address", last)
    return str(address) if address is not None else "(unknown worker)"

"""A server on this machine reports its context window (llama.cpp ``/props``, vLLM
``/v1/models``): agents get an output cap from it, asked once and lazily, and compaction
engages before the window overflows. Real HTTP on loopback (``peers.loopback``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import pytest
from peers.loopback import Captured, LoopbackServer, Reply, json_reply, sse_reply
from peers.wire import chunk, openai_body

from agentloop_nb import AgentOptions, App, RequestConfig
from agentloop_nb.llm.openai import LOCAL_DEFAULT_MAX_TOKENS, OpenAIAdapter
from agentloop_nb.llm.providers import build_adapters
from agentloop_nb.plugins.compaction import SUMMARY_SYSTEM

pytestmark = pytest.mark.anyio

WAIT = 10.0  # seconds: a guard against a hang, never a synchronisation point
NOT_FOUND = json_reply(404, {"error": {"code": 404, "message": "File Not Found"}})


def llamacpp(n_ctx: int) -> Callable[[Captured], Reply]:
    """llama-server's ``/props`` (per-slot ``n_ctx``); 404 elsewhere."""

    def handle(request: Captured) -> Reply:
        if request.method == "GET" and request.path == "/props":
            settings = {"n_ctx": n_ctx, "params": {"n_predict": -1}}
            return json_reply(200, {"default_generation_settings": settings, "total_slots": 1})
        return NOT_FOUND

    return handle


def probes(server: LoopbackServer) -> list[str]:
    return [r.path for r in server.requests if r.method == "GET"]


def app_for(server: LoopbackServer, **entry: Any) -> App:
    return App(providers={"local": {"type": "openai", "base_url": server.url + "/v1", **entry}})


async def cap(app: App, **config: Any) -> int | None:
    prepared = await app.ctx.llm.prepare_call(
        RequestConfig(provider="local", model="any", **config)
    )
    return prepared.config.max_tokens


async def test_a_llamacpp_server_is_asked_its_window_once_and_answers_get_a_quarter() -> None:
    with LoopbackServer(llamacpp(2048)) as server:
        app = app_for(server)
        try:
            assert server.requests == []  # nothing is asked when the App is built
            assert await cap(app) == 512
            assert await cap(app) == 512
            assert probes(server) == ["/props"]  # once, not per request
            assert await app.ctx.llm.adapter_for("local").context_window("any") == 2048
            assert probes(server) == ["/props"]
        finally:
            await app.aclose()


@pytest.mark.parametrize(("n_ctx", "expected"), [(4096, 1024), (131_072, 4096), (256, 64)])
async def test_the_cap_is_a_quarter_of_the_window_at_most_4096(n_ctx: int, expected: int) -> None:
    with LoopbackServer(llamacpp(n_ctx)) as server:
        app = app_for(server)
        try:
            assert await cap(app) == expected
        finally:
            await app.aclose()


async def test_a_vllm_server_reports_its_models_max_model_len() -> None:
    def vllm(request: Captured) -> Reply:
        if request.path == "/v1/models":
            models = [{"id": "other", "max_model_len": 999}, {"id": "any", "max_model_len": 8192}]
            return json_reply(200, {"object": "list", "data": models})
        return NOT_FOUND

    with LoopbackServer(vllm) as server:
        app = app_for(server)
        try:
            assert await cap(app) == 2048
            assert probes(server) == ["/props", "/v1/models"]
        finally:
            await app.aclose()


async def test_a_server_that_does_not_say_gets_the_documented_default_and_is_not_asked_again() -> (
    None
):
    def quiet(request: Captured) -> Reply:
        if request.path == "/v1/models":
            return json_reply(200, {"data": [{"id": "a"}, {"id": "b"}]})  # no window, no match
        return NOT_FOUND

    with LoopbackServer(quiet) as server:
        app = app_for(server)
        try:
            assert await cap(app) == LOCAL_DEFAULT_MAX_TOKENS == 1024
            assert await cap(app) == 1024
            assert probes(server) == ["/props", "/v1/models"]
        finally:
            await app.aclose()


async def test_a_server_still_loading_is_asked_again_on_the_next_request() -> None:
    loading = {"done": False}

    def server_side(request: Captured) -> Reply:
        if not loading["done"]:
            return json_reply(503, {"error": {"code": 503, "message": "Loading model"}})
        return llamacpp(8192)(request)

    with LoopbackServer(server_side) as server:
        app = app_for(server)
        try:
            assert await cap(app) == 1024  # no answer yet: the default, for this request only
            loading["done"] = True
            assert await cap(app) == 2048
            assert await cap(app) == 2048
            assert probes(server) == ["/props", "/v1/models", "/props"]
        finally:
            await app.aclose()


async def test_explicit_settings_win_and_spare_the_probe() -> None:
    with LoopbackServer(llamacpp(2048)) as server:
        for entry, config, expected in [
            ({"default_max_tokens": 300}, {}, 300),
            ({"context_window": 16_384}, {}, 4096),
            ({}, {"max_tokens": 64}, 64),
        ]:
            app = app_for(server, **entry)
            try:
                assert await cap(app, **config) == expected
            finally:
                await app.aclose()
        assert probes(server) == []


async def test_a_remote_endpoint_is_never_asked() -> None:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(404)

    async with httpx.AsyncClient(transport=httpx.MockTransport(record)) as client:
        adapter = OpenAIAdapter("https://api.example.com/v1", api_key="k", client=client)
        assert adapter.defaults(RequestConfig(provider="openai", model="m")) == {}
        assert await adapter.context_window("m") is None
    assert seen == []


async def test_a_probe_that_fails_never_fails_the_request() -> None:
    async def refuse_gets(request: httpx.Request) -> None:
        if request.method == "GET":
            raise RuntimeError("a client hook that chokes on the probe")

    with LoopbackServer(llamacpp(2048)) as server:
        async with httpx.AsyncClient(event_hooks={"request": [refuse_gets]}) as client:
            app = app_for(server, client=client)
            try:
                assert await cap(app) == 1024
            finally:
                await app.aclose()


def test_a_window_that_is_not_a_positive_int_is_refused_naming_the_provider() -> None:
    with pytest.raises(ValueError, match=r"provider 'local': context_window must be a positive"):
        build_adapters({"local": {"type": "openai", "context_window": "4k"}})


# -- compaction, through whole agents ---------------------------------------------------------


class ChatServer:
    """llama.cpp with ``-c WINDOW``: ``/props``, and chat completions that answer "answer N"
    reporting the prompt sizes given, or a summary for the compaction's call."""

    def __init__(self, window: int, prompt_tokens: list[int]) -> None:
        self.window = window
        self.prompt_tokens = list(prompt_tokens)
        self.chats: list[dict[str, Any]] = []

    def __call__(self, request: Captured) -> Reply:
        if request.method == "GET":
            return llamacpp(self.window)(request)
        body = request.json()
        self.chats.append(body)
        if body["messages"][0]["content"] == SUMMARY_SYSTEM:
            return self._answer("the gist so far", 20)
        n = sum(1 for b in self.chats if b["messages"][0]["content"] != SUMMARY_SYSTEM)
        return self._answer(f"answer {n}", self.prompt_tokens.pop(0))

    @staticmethod
    def _answer(text: str, prompt_tokens: int) -> Reply:
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 3, "total_tokens": 0}
        return sse_reply(
            openai_body(
                chunk({"role": "assistant", "content": text}),
                chunk({}, "stop"),
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion.chunk",
                    "choices": [],
                    "usage": usage,
                },
            )
        )


async def converse(app: App, prompts: list[str]) -> Any:
    agent = app.ctx.agent_loop.create("a", AgentOptions(provider="local", model="any"))
    for prompt in prompts:
        agent.followup(prompt)
        with anyio.fail_after(WAIT):
            await agent.when_idle()
    return agent


def summaries(agent: Any) -> list[Any]:
    return [e for e in agent.session.events if e.type == "compaction/summary"]


async def test_compaction_engages_by_default_before_the_reported_window_overflows() -> None:
    # -c 1000: answers are capped at 250 tokens, so a prompt past 750 leaves no room for one
    # (below the 80% ratio, 800): the fourth step starts from a summary.
    server = ChatServer(1000, [40, 80, 755, 60])
    with LoopbackServer(server) as loopback:
        app = app_for(loopback)
        try:
            agent = await converse(app, ["one", "two", "three", "four"])
        finally:
            await app.aclose()
    [summary] = summaries(agent)
    assert summary.data["reason"] == "pressure" and summary.data["summary"] == "the gist so far"
    systems = [b["messages"][0]["content"] for b in server.chats]
    assert systems.count(SUMMARY_SYSTEM) == 1 and systems[3] == SUMMARY_SYSTEM
    assert server.chats[3]["max_tokens"] == 250  # the summary is capped like the answers
    fourth = server.chats[4]
    assert fourth["messages"][1]["content"].startswith("Summary of the earlier conversation:")
    assert {
        b.get("max_tokens") for b in server.chats if b["messages"][0]["content"] != SUMMARY_SYSTEM
    } == {250}
    ends = [e.data["reason"]["kind"] for e in agent.session.events if e.type == "turn/end"]
    assert ends == ["completed"] * 4
    assert [p for p in probes(loopback)] == ["/props"]


@pytest.mark.parametrize(
    "settings",
    [
        {"compaction": False},
        {"models": {"any": {"context_window": 100_000}}},  # the person's figure wins
        {"compaction": {"context_window": 100_000}},
    ],
)
async def test_explicit_settings_keep_compaction_off_or_on_their_own_window(
    settings: dict[str, Any],
) -> None:
    server = ChatServer(400, [40, 80, 310, 60])
    with LoopbackServer(server) as loopback:
        app = App(
            providers={"local": {"type": "openai", "base_url": loopback.url + "/v1"}}, **settings
        )
        try:
            agent = await converse(app, ["one", "two", "three", "four"])
        finally:
            await app.aclose()
    assert summaries(agent) == []
    assert SUMMARY_SYSTEM not in json.dumps(server.chats)

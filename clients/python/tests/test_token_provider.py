"""A token provider: a function the client calls for the bearer token before every request and
every retry (how an OpenID provider's short-lived access tokens are refreshed), against the
real service."""

from __future__ import annotations

import asyncio
from typing import List

import httpx
import pytest

from dirichlet_release import AsyncClient, Client, TokenProvider, Unauthorized

from .conftest import FaultProxy, Server

COUNTS = [120, 45, 3, 0, 17, 9]


class Rotating:
    """Hands out the tokens of `tokens` in turn, one per call, counting the calls."""

    def __init__(self, tokens: List[str]) -> None:
        self.tokens = tokens
        self.calls = 0

    def __call__(self) -> str:
        token = self.tokens[min(self.calls, len(self.tokens) - 1)]
        self.calls += 1
        return token


def test_the_function_is_called_for_every_request(server: Server) -> None:
    with Client(server.base, server.admin) as admin:
        dataset = admin.create_dataset("token provider", epsilon=1.0, order=2).id
        analyst = admin.create_token([dataset]).token
    provider = Rotating([server.admin, analyst])
    source: TokenProvider = provider
    sent: List[str] = []

    def seen(request: httpx.Request) -> None:
        sent.append(request.headers["authorization"])

    with (
        httpx.Client(event_hooks={"request": [seen]}) as http,
        Client(server.base, source, http_client=http) as client,
    ):
        assert client.whoami().role == "admin"
        # The next call presents the next token: no client is rebuilt to change it.
        me = client.whoami()
        assert me.role == "analyst" and me.datasets == [dataset]
        client.release(dataset, COUNTS, epsilon=0.1)
    assert provider.calls == len(sent) >= 3
    assert sent[:2] == [f"Bearer {server.admin}", f"Bearer {analyst}"]
    assert set(sent[2:]) == {f"Bearer {analyst}"}


def test_a_retry_asks_for_the_token_again(server: Server, proxy: FaultProxy) -> None:
    with Client(server.base, server.admin) as admin:
        dataset = admin.create_dataset("token provider retry", epsilon=1.0, order=2).id
    proxy.plan["release"] = ["drop"]
    provider = Rotating([server.admin])
    with Client(proxy.base, provider, backoff=0.05) as client:
        client.release(dataset, COUNTS, epsilon=0.1)
    assert provider.calls == 2, "the first attempt and its retry"


def test_a_refused_token_from_the_function_is_unauthorized(server: Server) -> None:
    with (
        Client(server.base, lambda: "not-a-token-of-this-service", retries=0) as client,
        pytest.raises(Unauthorized),
    ):
        client.whoami()


def test_the_function_must_return_a_token() -> None:
    with pytest.raises(TypeError):
        Client("http://127.0.0.1:9", 42)  # type: ignore[arg-type]
    with Client("http://127.0.0.1:9", lambda: "", retries=0) as client, pytest.raises(TypeError):
        client.whoami()


def test_the_async_client_calls_it_too(server: Server) -> None:
    provider = Rotating([server.admin])

    async def scenario() -> None:
        async with AsyncClient(server.base, provider) as client:
            assert (await client.whoami()).role == "admin"
            await client.list_datasets()

    asyncio.run(scenario())
    assert provider.calls == 2

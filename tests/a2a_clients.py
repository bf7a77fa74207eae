"""A plain a2a-sdk client of an A2aAgentServer, as any A2A caller would make one: the card read
from its well-known URL, then a client for one protocol binding."""

from __future__ import annotations

import grpc.aio
import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import a2a_pb2


async def agent_card(port: int, scheme: str = "http") -> a2a_pb2.AgentCard:
    """The card an A2A server on 127.0.0.1:``port`` publishes."""
    async with httpx.AsyncClient() as http:
        return await A2ACardResolver(http, f"{scheme}://127.0.0.1:{port}").get_agent_card()


async def a2a_client(port: int, binding: str, *, streaming: bool = True) -> Client:
    """An a2a-sdk client of the server on 127.0.0.1:``port`` (plaintext) over ``binding``."""
    config = ClientConfig(
        streaming=streaming,
        supported_protocol_bindings=[binding],
        grpc_channel_factory=lambda url: grpc.aio.insecure_channel(url),
    )
    return ClientFactory(config).create(await agent_card(port))

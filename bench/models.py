"""Benchmark the providers' stream parsing: cost per streamed chunk, without the network.

Each provider's stream of ``--chunks`` text deltas is rendered once in its real wire format
(by the fake servers in :mod:`adk_mesh.testing.fake_providers`: Gemini and OpenAI SSE,
Anthropic SSE with named events, Ollama NDJSON), then fed record by record, as bytes, through
the same code a live request uses: the framing (``httpx-sse`` for SSE, our line decoder for
NDJSON, over an ``httpx.Response`` whose body yields one record per chunk) and the provider's
stream parser (JSON, partial ``LlmResponse`` per delta, final aggregate). Rows:

- ``<provider> full``: bytes -> partial responses -> final response (what a stream costs);
- ``<provider> framing``: bytes -> SSE events / NDJSON lines only (the async iteration included);
- ``<provider> json.loads``: the baseline, ``json.loads`` of each record's JSON payload, already
  split out (the least any parser must do).

Times are per streamed chunk (one delta), median of ``--runs`` runs; a provider's three rows
are timed interleaved, run by run (A B C, C B A, ...), garbage collector on.

Run: ``.venv/bin/python bench/models.py [--chunks N] [--runs R]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
from collections.abc import AsyncIterator, Callable

import httpx
from _harness import Measurement, format_table, measure_interleaved

from adk_mesh.models import AnthropicModel, GeminiModel, OllamaModel, OpenAIModel
from adk_mesh.models._http import HttpLlm
from adk_mesh.testing.fake_providers import (
    FakeAnthropic,
    FakeGemini,
    FakeOllama,
    FakeOpenAI,
    FakeProviderServer,
    RecordedRequest,
    ScriptedTurn,
)

WORDS = ["The ", "quick ", "brown ", "fox ", "jumps ", "über ", "the ", "lazy ", "dog. ", "🦊 "]


def recorded_stream(server: FakeProviderServer, model: HttpLlm, deltas: list[str]) -> list[bytes]:
    """The stream the provider would send for ``deltas``, one record per element."""
    from adk_mesh.models import LlmRequest
    from adk_mesh.types import Content

    wire = model._build_request(
        LlmRequest(contents=[Content.from_text("user", "Tell me a story.")]), stream=True
    )
    request = RecordedRequest(
        method="POST",
        path=wire.path,
        query=wire.params,
        headers={},
        body=json.dumps(wire.body).encode(),
    )
    return server.render_stream(ScriptedTurn(text=deltas), request)


def payloads(records: list[bytes]) -> list[bytes]:
    """The JSON payload of every record (the ``data:`` value, or the NDJSON line)."""
    out = []
    for record in records:
        for line in record.splitlines():
            if line.startswith(b"data: "):
                line = line[6:]
            elif line.startswith((b"event:", b":")) or not line.strip():
                continue
            if line != b"[DONE]":
                out.append(line)
    return out


class _Body(httpx.AsyncByteStream):
    """A response body that yields the recorded stream one record per chunk."""

    def __init__(self, records: list[bytes]) -> None:
        self._records = records

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for record in self._records:
            yield record


def _response(server: FakeProviderServer, records: list[bytes]) -> httpx.Response:
    headers = {"content-type": server.stream_content_type}
    return httpx.Response(200, headers=headers, stream=_Body(records))


def full_parse(
    loop: asyncio.AbstractEventLoop,
    server: FakeProviderServer,
    model: HttpLlm,
    records: list[bytes],
    expected: str,
) -> Callable[[], None]:
    async def parse() -> None:
        parser = model._new_stream_parser()
        async for record in model._records(_response(server, records)):
            parser.feed(record)
        final = parser.final()
        assert final.content is not None and final.content.text == expected

    return lambda: loop.run_until_complete(parse())


def framing_only(
    loop: asyncio.AbstractEventLoop,
    server: FakeProviderServer,
    model: HttpLlm,
    records: list[bytes],
) -> Callable[[], None]:
    async def frame() -> None:
        async for _ in model._records(_response(server, records)):
            pass

    return lambda: loop.run_until_complete(frame())


def json_baseline(lines: list[bytes]) -> Callable[[], None]:
    def run() -> None:
        loads = json.loads
        for line in lines:
            loads(line)

    return run


def per_chunk(measurement: Measurement, chunks: int) -> Measurement:
    return Measurement(
        name=measurement.name,
        iterations=measurement.iterations * chunks,
        run_seconds=measurement.run_seconds,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=2000, help="text deltas per stream")
    parser.add_argument("--runs", type=int, default=7, help="timed runs (median reported)")
    parser.add_argument("--iterations", type=int, default=3, help="streams parsed per run")
    args = parser.parse_args()
    if args.runs < 5:
        parser.error("--runs must be at least 5 (the median of fewer runs is noise)")

    deltas = [WORDS[i % len(WORDS)] for i in range(args.chunks)]
    expected = "".join(deltas)
    providers: list[tuple[str, FakeProviderServer, HttpLlm]] = [
        ("gemini", FakeGemini(), GeminiModel("gemini-2.5-flash", api_key="bench")),
        ("openai", FakeOpenAI(), OpenAIModel("gpt-4o-mini", api_key="bench")),
        ("anthropic", FakeAnthropic(), AnthropicModel("claude-sonnet-4-5", api_key="bench")),
        ("ollama", FakeOllama(), OllamaModel("llama3.2")),
    ]

    rows: list[Measurement] = []
    baseline: Measurement | None = None
    loop = asyncio.new_event_loop()
    for name, server, model in providers:
        records = recorded_stream(server, model, deltas)
        size = sum(map(len, records))
        print(f"{name}: {len(records)} records, {size / 1024:.0f} KiB", file=sys.stderr)
        measured = measure_interleaved(
            [
                (
                    f"{name} full (bytes -> LlmResponse)",
                    full_parse(loop, server, model, records, expected),
                ),
                (f"{name} framing only", framing_only(loop, server, model, records)),
                (f"{name} json.loads per record", json_baseline(payloads(records))),
            ],
            iterations=args.iterations,
            runs=args.runs,
        )
        for row in (per_chunk(measurement, args.chunks) for measurement in measured):
            rows.append(row)
            if baseline is None and row.name.startswith("openai json.loads"):
                baseline = row
    print(
        f"Python {platform.python_version()} on {platform.machine()}; "
        f"{args.chunks} text deltas per stream, median of {args.runs} runs of "
        f"{args.iterations} streams, each provider's rows interleaved run by run, GC on; "
        "baseline: openai json.loads per record\n"
    )
    loop.close()
    print(format_table(rows, unit="chunks", baseline=baseline))


if __name__ == "__main__":
    main()

"""Benchmark the providers' stream parsing: cost per streamed chunk, without the network.

Each provider's stream of ``--chunks`` text deltas is rendered once in its real wire format
(by the fake servers in :mod:`adk_mesh.testing.fake_providers`: Gemini and OpenAI SSE,
Anthropic SSE with named events, Ollama NDJSON), then fed record by record, as bytes, through
the same code a live request uses: the framing decoder (incremental UTF-8, line splitting,
SSE fields) and the provider's stream parser (JSON, partial ``LlmResponse`` per delta, final
aggregate). Rows:

- ``<provider> full``: bytes -> partial responses -> final response (what a stream costs);
- ``<provider> framing``: bytes -> SSE events / NDJSON lines only;
- ``<provider> json.loads``: the baseline, ``json.loads`` of each record's JSON payload, already
  split out (the least any parser must do).

Times are per streamed chunk (one delta), median of ``--runs`` runs.

Run: ``.venv/bin/python bench/models.py [--chunks N] [--runs R]``
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Callable

from _harness import Measurement, format_table, measure

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


def full_parse(model: HttpLlm, records: list[bytes], expected: str) -> Callable[[], None]:
    def run() -> None:
        decoder = model._new_decoder()
        parser = model._new_stream_parser()
        for record in records:
            for event in decoder.feed(record):
                parser.feed(event)
        for event in decoder.flush():
            parser.feed(event)
        final = parser.final()
        assert final.content is not None and final.content.text == expected

    return run


def framing_only(model: HttpLlm, records: list[bytes]) -> Callable[[], None]:
    def run() -> None:
        decoder = model._new_decoder()
        for record in records:
            decoder.feed(record)
        decoder.flush()

    return run


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
    for name, server, model in providers:
        records = recorded_stream(server, model, deltas)
        size = sum(map(len, records))
        print(f"{name}: {len(records)} records, {size / 1024:.0f} KiB", file=sys.stderr)
        for label, operation in (
            (f"{name} full (bytes -> LlmResponse)", full_parse(model, records, expected)),
            (f"{name} framing only", framing_only(model, records)),
            (f"{name} json.loads per record", json_baseline(payloads(records))),
        ):
            measured = measure(label, operation, iterations=args.iterations, runs=args.runs)
            row = per_chunk(measured, args.chunks)
            rows.append(row)
            if baseline is None and label.startswith("openai json.loads"):
                baseline = row
    print(
        f"Python {platform.python_version()} on {platform.machine()}; "
        f"{args.chunks} text deltas per stream, median of {args.runs} runs of "
        f"{args.iterations} streams; baseline: openai json.loads per record\n"
    )
    print(format_table(rows, unit="chunks", baseline=baseline))


if __name__ == "__main__":
    main()

"""Benchmark the codec on a typical event, against pydantic's own JSON as a baseline.

The event is what an agent turn produces most often: a model reply with a text part and a
function call (small nested args), plus a state delta of three keys. Encoding is
pydantic -> protobuf message -> bytes; decoding is bytes -> protobuf message -> pydantic.
``model_dump_json`` / ``model_validate_json`` of the same event run alongside for comparison,
interleaved with it run by run (A B, B A, ...), garbage collector on.

Run: ``.venv/bin/python bench/codec.py [--iterations N] [--runs R]``
"""

from __future__ import annotations

import argparse
import platform
import sys
from datetime import UTC, datetime

import google.protobuf
import pydantic
from _harness import format_table, measure_interleaved
from google.protobuf.internal import api_implementation

from adk_mesh import codec
from adk_mesh.types import Content, Event, EventActions, LlmResponse, Part
from adk_mesh.v1 import event_pb2


def typical_event() -> Event:
    content = Content(role="model").with_text(
        "I'll look up nonstop flights from San Francisco to Tokyo for you."
    )
    content = content.with_part(
        Part.from_function_call(
            "search_flights",
            {
                "origin": "SFO",
                "destination": "NRT",
                "date": "2025-03-14",
                "passengers": {"adults": 2, "children": [7, 10]},
                "nonstop": True,
                "max_price": 1450.5,
            },
            id="call-9f1c2e",
        )
    )
    return Event(
        id="5b0d8a4e-8c3f-4f5e-9a53-1c1f3f8f0e21",
        timestamp=datetime(2025, 3, 1, 9, 30, 12, 345_678, tzinfo=UTC),
        invocation_id="e-7d2a61c0-44b3-4c8e-8e51-0b1b5a0c3d77",
        branch="travel_agent.flight_agent",
        author="flight_agent",
        llm_response=LlmResponse(content=content),
        actions=EventActions(
            state_delta={
                "user:home_airport": "SFO",
                "trip_budget": 2500,
                "temp:last_search": {"destination": "NRT", "page": 1},
            }
        ),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--iterations", type=int, default=5_000, help="calls per timed run")
    parser.add_argument("--runs", type=int, default=7, help="timed runs (the median is shown)")
    args = parser.parse_args(argv)
    if args.runs < 5:
        parser.error("--runs must be at least 5: the median of fewer runs is noise")

    event = typical_event()
    wire = codec.event_to_proto(event).SerializeToString()
    json_text = event.model_dump_json()
    # Benchmark only a codec that is right: both paths must give the event back.
    assert codec.event_from_proto(event_pb2.Event.FromString(wire)) == event
    assert Event.model_validate_json(json_text) == event

    def encode() -> bytes:
        return codec.event_to_proto(event).SerializeToString()

    def decode() -> Event:
        return codec.event_from_proto(event_pb2.Event.FromString(wire))

    def dump_json() -> str:
        return event.model_dump_json()

    def validate_json() -> Event:
        return Event.model_validate_json(json_text)

    timing = {"iterations": args.iterations, "runs": args.runs}
    encode_proto, encode_json = measure_interleaved(
        [
            ("protobuf: pydantic -> proto -> bytes", encode),
            ("pydantic: model_dump_json", dump_json),
        ],
        **timing,
    )
    decode_proto, decode_json = measure_interleaved(
        [
            ("protobuf: bytes -> proto -> pydantic", decode),
            ("pydantic: model_validate_json", validate_json),
        ],
        **timing,
    )

    print(
        f"codec benchmark: Python {platform.python_version()}, protobuf "
        f"{google.protobuf.__version__} ({api_implementation.Type()}), pydantic "
        f"{pydantic.VERSION}"
    )
    print(
        f"event: 1 text part + 1 function call (nested args) + 3-key state delta; "
        f"{len(wire)} bytes protobuf, {len(json_text.encode())} bytes pydantic JSON"
    )
    print(
        f"median of {args.runs} runs x {args.iterations:,} iterations each, the two sides "
        "interleaved run by run, GC on\n"
    )
    print("encode")
    print(format_table([encode_proto, encode_json], unit="events", baseline=encode_json))
    print("\ndecode")
    print(format_table([decode_proto, decode_json], unit="events", baseline=decode_json))
    round_trip_proto = encode_proto.microseconds_each + decode_proto.microseconds_each
    round_trip_json = encode_json.microseconds_each + decode_json.microseconds_each
    print(
        f"\nround trip: protobuf {round_trip_proto:.1f} us/event, "
        f"pydantic JSON {round_trip_json:.1f} us/event"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

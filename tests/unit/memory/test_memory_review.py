"""Defects found reviewing memory (the stores, the memory tools, ``adk_mesh._memory``), each
pinned by a test."""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections.abc import Callable

import pytest

from adk_mesh import LlmAgent, Runner, codec, load_memory
from adk_mesh._memory import event_bytes
from adk_mesh.memory import InMemoryMemoryService
from adk_mesh.sessions import InMemorySessionService, Session
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Content, Event, Part


def _text_event(text: str) -> Callable[[int], Event]:
    return lambda i: Event.new(
        author="echo", invocation_id=f"i{i}", content=Content.from_text("model", f"{i} {text}")
    )


def _signed_event(i: int) -> Event:
    # Gemini's thought signatures ride on text and function-call parts; they run to kilobytes.
    part = Part(text=f"answer {i}", thought_signature=bytes([i % 256]) * 8_000)
    return Event.new(
        author="echo", invocation_id=f"i{i}", content=Content(role="model", parts=[part])
    )


SHAPES: dict[str, Callable[[int], Event]] = {
    # Python keeps a str at 1, 2 or 4 bytes per character, by its widest character.
    "5,000 CJK characters": _text_event("日本語のテキスト" * 625),
    "5,000 emoji": _text_event("\U0001f600" * 5_000),
    "a thought signature": _signed_event,
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_the_estimate_of_an_event_covers_wide_text_and_thought_signatures(shape: str) -> None:
    """The caches of events (``codec.DECODED_EVENTS`` and the others, 32 MiB each) are
    bounded by :func:`event_bytes`, which promises never to be below what an event holds.
    Text counted as characters is 2x below for CJK, 4x for emoji, and thought signatures
    were not counted at all: a cache of such events held several times its bound."""
    make = SHAPES[shape]
    messages = [codec.event_to_proto(make(i)) for i in range(200)]
    cache = codec.DecodedEvents(1 << 40)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for message in messages:
            cache.decode(message)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()

    assert grown <= cache.held_bytes


def test_one_wide_text_is_weighed_by_its_memory() -> None:
    text = "\U0001f600" * 100_000  # 400 KB of memory, 100,000 characters
    event = Event.new(author="echo", content=Content.from_text("model", text))

    assert event_bytes(event) >= 400_000


# --- load_memory's answer ---------------------------------------------------------------------


async def test_load_memory_answers_with_what_was_said_not_attachments_or_reasoning() -> None:
    """An earlier turn's photo (megabytes) and the model's private reasoning (thought parts and
    their signatures) are in memory with the words they came with. ``load_memory`` answers in
    a function response, which stays in the session and goes back to the model on every later
    call: base64 of the photo there (which no model reads as an image) made every later
    request of the session megabytes larger, past a model's context after a few such turns.
    The answer keeps the text and says that a photo was there; preload_memory, which adds
    the text alone, already did so."""
    photo = bytes(range(256)) * 12_000  # 3 MB
    memory = InMemoryMemoryService()
    earlier = Session(
        id="earlier",
        app_name="app",
        user_id="alice",
        events=[
            Event.new(
                author="user",
                content=Content(
                    role="user",
                    parts=[
                        Part.from_text("a photo of my cat Miso"),
                        Part.from_inline_data("image/png", photo),
                    ],
                ),
            ),
            Event.new(
                author="helper",
                content=Content(
                    role="model",
                    parts=[
                        Part(text="private reasoning", thought=True, thought_signature=b"s" * 4096),
                        Part.from_text("What a lovely cat, Miso!"),
                    ],
                ),
            ),
        ],
    )
    await memory.add_session_to_memory(earlier)
    model = ScriptedModel([call("load_memory", {"query": "Miso"}), "Miso, your cat."])
    agent = LlmAgent(name="helper", model=model, tools=[load_memory])
    sessions = InMemorySessionService()
    runner = Runner(agent=agent, app_name="app", session_service=sessions, memory_service=memory)
    session = await sessions.create_session(app_name="app", user_id="alice")

    events = [
        event
        async for event in runner.run(
            user_id="alice", session_id=session.id, new_message=Content.from_text("user", "cat?")
        )
    ]

    (response,) = [r.response for event in events for r in event.function_responses()]
    answer = json.dumps(response)
    assert len(answer) < 2_000
    texts = [
        part.get("text") for memory_ in response["memories"] for part in memory_["content"]["parts"]
    ]
    assert "a photo of my cat Miso" in texts
    assert "What a lovely cat, Miso!" in texts
    assert "private reasoning" not in answer
    assert "image/png" in answer  # the model is told a photo was there

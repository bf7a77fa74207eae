"""RequestHistory against what can happen to a session between two requests of an agent:
other agents and branches appending, windows stepping forward, the session read again (copies),
a different session under the same id (events reusing ids), a tight bound evicting histories.
Every request's contents must equal a whole rebuild (:func:`request_contents`)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adk_mesh import CallbackContext, LlmAgent, Runner
from adk_mesh._memory import event_bytes
from adk_mesh.agents.history import RequestHistory, request_contents
from adk_mesh.models.base import LlmRequest
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import FunctionModel, text
from adk_mesh.types import Content, Event, EventActions, LlmResponse, Part, ToolConfirmation

KEYS = [("app", "user", "s1"), ("app", "user", "s2")]


def assert_weighed(history: RequestHistory) -> None:
    """The history's total is the estimated memory of the events its prefixes hold."""
    held = sum(event_bytes(event) for p in history._prefixes.values() for event in p.events)
    assert history.held_bytes == held


def event(
    author: str,
    role: str,
    parts: list[Part],
    *,
    branch: str = "",
    long_running: tuple[str, ...] = (),
    event_id: str | None = None,
) -> Event:
    made = Event(
        author=author,
        branch=branch,
        invocation_id="i1",
        llm_response=LlmResponse(content=Content(role=role, parts=parts)),
        long_running_tool_ids=list(long_running),
    )
    return made if event_id is None else made.model_copy(update={"id": event_id})


def turn(agent: str, call_id: str, *, branch: str = "", ids: str = "") -> list[Event]:
    """A user's question, the agent's call, its response and the agent's answer."""
    return [
        event("user", "user", [Part(text="q")], event_id=f"{ids}q" if ids else None),
        event(
            agent,
            "model",
            [Part.from_function_call("f", {}, id=call_id)],
            branch=branch,
            event_id=f"{ids}c" if ids else None,
        ),
        event(
            agent,
            "user",
            [Part.from_function_response("f", {"n": call_id}, id=call_id)],
            branch=branch,
            event_id=f"{ids}r" if ids else None,
        ),
        event(agent, "model", [Part(text="a")], branch=branch, event_id=f"{ids}a" if ids else None),
    ]


@st.composite
def odd_events(draw: st.DrawFn) -> Event:
    """One event of any kind the rules treat apart, often malformed: calls and responses by
    anyone on any branch, with or without ids, duplicated, confirmations, partial, empty."""
    author = draw(st.sampled_from(["user", "me", "other", "me2"]))
    kind = draw(st.sampled_from(["text", "call", "response", "empty", "confirm", "no_id"]))
    long_running: list[str] = []
    actions = EventActions(skip_summarization=draw(st.integers(0, 9)) == 0)
    parts: list[Part]
    if kind == "text":
        parts = [Part(text=draw(st.sampled_from(["hi", " "])))]
    elif kind == "call":
        ids = draw(st.lists(st.sampled_from(["c1", "c2", "lr"]), min_size=1, max_size=2))
        parts = [Part.from_function_call("f", {}, id=call_id) for call_id in ids]
        if draw(st.booleans()):
            long_running = ids[:1]
    elif kind == "response":
        ids = draw(st.lists(st.sampled_from(["c1", "c2", "lr"]), min_size=1, max_size=2))
        parts = [Part.from_function_response("f", {}, id=call_id) for call_id in ids]
        if draw(st.booleans()):
            parts.insert(0, Part(text="t"))
    elif kind == "confirm":
        if draw(st.booleans()):
            parts = [Part.from_function_call("adk_request_confirmation", {}, id="k1")]
            long_running = ["k1"]
            actions = EventActions(requested_tool_confirmations={"c1": ToolConfirmation()})
        else:
            parts = [Part.from_function_response("adk_request_confirmation", {}, id="k1")]
    elif kind == "no_id":
        parts = [
            Part.from_function_call("f", {}, id=None)
            if draw(st.booleans())
            else Part.from_function_response("f", {}, id=None)
        ]
    else:
        parts = []
    if draw(st.integers(0, 5)) == 0:
        role = draw(st.sampled_from(["user", "model", "tool", "assistant"]))
    else:
        role = "model" if kind in ("call", "text") and author != "user" else "user"
    return Event(
        author=author,
        invocation_id=draw(st.sampled_from(["i1", "i2"])),
        branch=draw(st.sampled_from(["", "", "me", "p.me", "p.other", "p"])),
        llm_response=LlmResponse(
            content=Content(role=role, parts=parts)
            if kind != "empty" or draw(st.booleans())
            else None,
            partial=draw(st.integers(0, 12)) == 0,
        ),
        actions=actions,
        long_running_tool_ids=long_running,
    )


@st.composite
def appended(draw: st.DrawFn, n: int) -> list[Event]:
    """What one step of a session appends: mostly well-formed turns (so that prefixes are kept),
    by this agent, another one or a parallel sibling, long-running calls answered later, or
    an odd event."""
    kind = draw(
        st.sampled_from(
            ["turn", "turn", "turn", "sibling", "parallel", "lr_call", "lr_answer", "odd"]
        )
    )
    agent = draw(st.sampled_from(["me", "me", "me2"]))
    call_id = draw(st.sampled_from([f"t{n}", f"t{n}", "c1", "lr"]))
    branch = draw(st.sampled_from(["", "", "p.me"]))
    if kind == "turn":
        return turn(agent, call_id, branch=branch)
    if kind == "sibling":
        return [
            event(
                "other", "model", [Part.from_function_call("f", {}, id=call_id)], branch="p.other"
            ),
            event(
                "other",
                "user",
                [Part.from_function_response("f", {}, id=call_id)],
                branch="p.other",
            ),
            event(
                "other", "model", [Part(text="o")], branch=draw(st.sampled_from(["", "p.other"]))
            ),
        ]
    if kind == "parallel":  # two siblings' calls and responses interleaved
        return [
            event(agent, "model", [Part.from_function_call("f", {}, id=call_id)], branch="p.me"),
            event("other", "model", [Part.from_function_call("g", {}, id=f"o{n}")], branch="p.o"),
            event(
                "other", "user", [Part.from_function_response("g", {}, id=f"o{n}")], branch="p.o"
            ),
            event(agent, "user", [Part.from_function_response("f", {}, id=call_id)], branch="p.me"),
        ]
    if kind == "lr_call":
        made = [
            event(
                agent,
                "model",
                [Part.from_function_call("w", {}, id="lr")],
                branch=branch,
                long_running=("lr",),
            )
        ]
        if draw(st.booleans()):  # an intermediate answer
            made.append(
                event(agent, "user", [Part.from_function_response("w", {"s": "..."}, id="lr")])
            )
        return made
    if kind == "lr_answer":
        return [event("user", "user", [Part.from_function_response("w", {"s": "ok"}, id="lr")])]
    return [draw(odd_events())]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    max_sessions=st.sampled_from([1, 2, 128]),
    max_bytes=st.sampled_from([6000, 40000, 32 * 1024 * 1024]),
)
def test_every_request_equals_a_whole_rebuild_whatever_happens_between(
    data: Any, max_sessions: int, max_bytes: int
) -> None:
    """Two sessions through one history (one agent object, two Runners), tightly bounded or
    not; between requests: appends, a window stepping forward, the session read again (copies
    from any point), a different session under the same id (its events copies, one of them
    another event reusing an id)."""
    history = RequestHistory(max_sessions=max_sessions, max_bytes=max_bytes)
    sessions: dict[tuple[str, str, str], list[Event]] = {key: [] for key in KEYS}
    starts = dict.fromkeys(KEYS, 0)
    counter = itertools.count()
    steps = st.sampled_from(["append"] * 4 + ["request"] * 4 + ["window", "copies", "other"])
    for _ in range(data.draw(st.integers(1, 60), label="steps")):
        step = data.draw(steps)
        key = data.draw(st.sampled_from(KEYS))
        events = sessions[key]
        if step == "append":
            for _ in range(data.draw(st.integers(1, 3))):
                events.extend(data.draw(appended(next(counter))))
        elif step == "copies" and events:
            start = data.draw(st.integers(0, len(events)))
            sessions[key] = [*events[:start], *(e.model_copy(deep=True) for e in events[start:])]
        elif step == "other" and events:
            other = [e.model_copy(deep=True) for e in events]
            index = data.draw(st.integers(0, len(other) - 1))
            replacement = data.draw(
                st.just(event("user", "user", [Part(text="edited")])) | odd_events()
            )
            other[index] = replacement.model_copy(update={"id": other[index].id})
            sessions[key] = other
        elif step in ("request", "window"):
            if step == "window":
                starts[key] = data.draw(st.integers(starts[key], len(events)))
            window = sessions[key][starts[key] :]
            agent = data.draw(st.sampled_from(["me", "me", "me2"]))
            branch = data.draw(st.sampled_from(["", "", "p.me"]))
            built = history.contents(key, window, agent_name=agent, branch=branch)
            assert built == request_contents(window, agent_name=agent, branch=branch)
            assert_weighed(history)
            assert len(history._prefixes) <= max_sessions
            assert history.held_bytes <= max_bytes


def test_a_session_made_again_under_its_id_with_the_same_event_ids_is_built_whole() -> None:
    """A session deleted and made again under the same id, its transcript imported again with
    the same event ids but edited (a tool's result taken out): the kept prefix's events match
    by id, yet the history they make no longer pairs every call."""
    key = KEYS[0]
    first = [*turn("me", "c1", ids="a"), *turn("me", "c2", ids="b")]
    history = RequestHistory()
    question = event("user", "user", [Part(text="next")])
    built = history.contents(key, [*first, question], agent_name="me")
    assert built == request_contents([*first, question], agent_name="me")
    assert history._prefixes  # the conversation up to the question is kept
    edited = [*turn("me", "c1", ids="a"), *turn("me", "c2", ids="b")]
    edited[6] = event("user", "user", [Part(text="never mind")], event_id=edited[6].id)
    again = [*edited, event("user", "user", [Part(text="next")])]
    built = history.contents(key, again, agent_name="me")
    expected = request_contents(again, agent_name="me")
    assert built == expected
    # The call left without its result is answered (as interrupted) right after it.
    assert expected[6].function_responses[0].id == "c2"
    assert_weighed(history)


def test_an_event_reusing_an_id_is_weighed_as_it_is() -> None:
    """The kept prefix's weight follows the events it holds, not those it held before."""
    key = KEYS[0]
    first = [*turn("me", "c1", ids="a"), *turn("me", "c2", ids="b")]
    history = RequestHistory()
    history.contents(key, [*first, event("user", "user", [Part(text="next")])], agent_name="me")
    again = [e.model_copy(deep=True) for e in first]
    again[3] = event("me", "model", [Part(text="a" * 100_000)], event_id=again[3].id)
    again.append(event("user", "user", [Part(text="next")]))
    assert history.contents(key, again, agent_name="me") == request_contents(again, agent_name="me")
    assert_weighed(history)


async def test_one_agent_in_two_runners_with_a_session_of_the_same_id_concurrently() -> None:
    """One agent object serving two stores' sessions of the same id at once, their events
    reusing ids (an imported transcript, one of them edited): each request is the whole
    rebuild of its own session."""
    seen: list[tuple[list[Content], list[Content]]] = []

    async def check(callback_context: CallbackContext, llm_request: LlmRequest) -> None:
        events = callback_context.invocation_context.session.events
        seen.append((list(llm_request.contents), request_contents(events, agent_name="me")))
        await asyncio.sleep(0)  # let the other runner's turn in

    agent = LlmAgent(
        name="me", model=FunctionModel(lambda request: text("ok")), before_model_callback=check
    )
    services = [InMemorySessionService(), InMemorySessionService()]
    for service in services:
        session = await service.create_session(app_name="app", user_id="user", session_id="s1")
        transcript = [*turn("me", "c1", ids="x"), *turn("me", "c2", ids="y")]
        if service is services[1]:  # the second call's result left out
            transcript[6] = event("user", "user", [Part(text="?")], event_id=transcript[6].id)
        for item in transcript:
            await service.append_event(session, item)
    runners = [Runner(agent=agent, app_name="app", session_service=s) for s in services]

    async def run(runner: Runner, message: str) -> None:
        content = Content.from_text("user", message)
        async for _ in runner.run(user_id="user", session_id="s1", new_message=content):
            pass

    for round_ in range(3):
        for order in (runners, runners[::-1]):
            await asyncio.gather(*(run(runner, f"m{round_}") for runner in order))
    assert len(seen) == 12
    for built, expected in seen:
        assert built == expected

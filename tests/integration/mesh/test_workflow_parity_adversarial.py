"""Workflow control across the hop: the same SequentialAgent / ParallelAgent / LoopAgent tree
behaves the same whether a child runs in process or behind a RemoteAgent served by an
AgentServer on 127.0.0.1 (this process). Each case plays once with the child in process and
once remote; the outcomes (events yielded and stored, state, what each model was sent, what
the tools observed, the error raised) must be identical, and each case checks what it says.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.agents.workflow import LoopAgent, ParallelAgent, SequentialAgent
from adk_mesh.contexts import (
    CallbackContext,
    InvocationContext,
    ReadonlyContext,
    ToolContext,
)
from adk_mesh.testing import call
from adk_mesh.tools.builtin import ExitLoopTool
from adk_mesh.types import Content, Event, EventActions
from tests.integration.mesh.test_parity import (
    IN_PROCESS,
    REMOTE,
    Outcome,
    World,
    authors,
    texts,
)

Build = Callable[[World], Awaitable[None]]


async def _play(build: Build, where: str, directory: Path) -> Outcome:
    async with AsyncExitStack() as stack:
        world = World(where, directory, stack)
        await build(world)
        return await world.outcome()


async def _both(build: Build, tmp_path: Path) -> Outcome:
    """The outcome in process, checked identical to the remote one."""
    local = await _play(build, IN_PROCESS, tmp_path / IN_PROCESS)
    remote = await _play(build, REMOTE, tmp_path / REMOTE)
    assert remote == local
    return local


def branches(outcome: Outcome) -> list[tuple[str, str | None]]:
    return [(event["author"], event.get("branch")) for event in outcome["events"]]


def observing(world: World, who: str, keys: tuple[str, ...]) -> Callable[[ReadonlyContext], str]:
    def instruction(ctx: ReadonlyContext) -> str:
        world.observed.append([who, {key: ctx.state.get(key) for key in keys}])
        return "Work."

    return instruction


def bump(tool_context: ToolContext) -> dict[str, Any]:
    """Count a round, in session and temp: state."""
    count = int(tool_context.state.get("count", 0)) + 1
    tool_context.state["count"] = count
    tool_context.state["temp:scratch"] = f"round {count}"
    return {"count": count}


async def test_exit_loop_from_a_remote_child_ends_the_loop_where_it_would(
    tmp_path: Path,
) -> None:
    async def build(world: World) -> None:
        worker = LlmAgent(
            name="worker",
            model=world.scripted(
                "worker", [call("bump"), "draft 1", call("bump"), call("exit_loop")]
            ),
            tools=[bump, ExitLoopTool()],
            instruction=observing(world, "worker", ("count", "temp:scratch")),
        )
        checker = LlmAgent(
            name="checker",
            model=world.scripted("checker", ["not yet"]),
            instruction=observing(world, "checker", ("count", "temp:scratch")),
        )
        loop = LoopAgent(
            name="loop", sub_agents=[await world.child(worker), checker], max_iterations=5
        )
        after = LlmAgent(
            name="after",
            model=world.scripted("after", ["after the loop"]),
            instruction=observing(world, "after", ("count", "temp:scratch")),
        )
        await world.new_session()
        await world.turn(SequentialAgent(name="flow", sub_agents=[loop, after]))

    outcome = await _both(build, tmp_path)
    assert outcome["errors"] == []
    # Round 1: bump, draft; checker. Round 2: bump, exit_loop (escalates); no checker.
    assert authors(outcome) == ["worker"] * 3 + ["checker"] + ["worker"] * 4 + ["after"]
    assert outcome["events"][-2]["actions"]["escalate"] is True
    assert texts(outcome, "after") == ["after the loop"]
    assert outcome["observed"] == [
        ["worker", {"count": None, "temp:scratch": None}],
        ["worker", {"count": 1, "temp:scratch": "round 1"}],
        ["checker", {"count": 1, "temp:scratch": "round 1"}],
        ["worker", {"count": 1, "temp:scratch": "round 1"}],
        ["worker", {"count": 2, "temp:scratch": "round 2"}],
        ["after", {"count": 2, "temp:scratch": "round 2"}],
    ]
    assert outcome["state"] == {"count": 2}  # temp: is not stored
    assert all(
        "temp:scratch" not in event.get("actions", {}).get("state_delta", {})
        for event in outcome["stored"]
    )


async def test_a_remote_child_in_a_bounded_loop_runs_each_round(tmp_path: Path) -> None:
    async def build(world: World) -> None:
        worker = LlmAgent(
            name="worker",
            model=world.scripted("worker", [call("bump"), "one", call("bump"), "two"]),
            tools=[bump],
            instruction=observing(world, "worker", ("count",)),
        )
        loop = LoopAgent(name="loop", sub_agents=[await world.child(worker)], max_iterations=2)
        await world.new_session()
        await world.turn(loop)

    outcome = await _both(build, tmp_path)
    assert authors(outcome) == ["worker"] * 6
    assert texts(outcome) == ["one", "two"]
    assert outcome["state"] == {"count": 2}
    assert outcome["observed"] == [
        ["worker", {"count": None}],
        ["worker", {"count": 1}],
        ["worker", {"count": 1}],
        ["worker", {"count": 2}],
    ]


async def test_a_remote_step_failing_mid_sequence(tmp_path: Path) -> None:
    async def build(world: World) -> None:
        first = LlmAgent(name="first", model=world.scripted("first", ["first done"]))
        failing = LlmAgent(
            name="failing",
            model=world.scripted("failing", [call("bump")]),  # then out of script
            tools=[bump],
        )
        last = LlmAgent(name="last", model=world.scripted("last", ["never"]))
        flow = SequentialAgent(name="flow", sub_agents=[first, await world.child(failing), last])
        await world.new_session()
        await world.turn(flow)

    outcome = await _both(build, tmp_path)
    assert len(outcome["errors"]) == 1
    assert outcome["errors"][0].startswith("ModelError")
    assert authors(outcome) == ["first", "failing", "failing"]
    assert outcome["seen"]["last"] == []
    assert [event["author"] for event in outcome["stored"]] == [
        "user",
        "first",
        "failing",
        "failing",
    ]
    assert outcome["state"] == {"count": 1}


def mark(tool_context: ToolContext) -> dict[str, Any]:
    """Note what this branch did, under a key of its own."""
    tool_context.state[f"did:{tool_context.agent_name}"] = tool_context.branch
    return {"branch": tool_context.branch}


def _per_branch(outcome: Outcome, key: str) -> dict[str, list[Any]]:
    """The events of ``outcome[key]`` grouped by branch, in order within each: how the
    children of a ParallelAgent interleave is a matter of timing."""
    grouped: dict[str, list[Any]] = {}
    for event in outcome[key]:
        grouped.setdefault(event.get("branch", ""), []).append(_without_ids(event))
    return grouped


def _without_ids(value: Any) -> Any:
    """``value`` without its ids, which are numbered in order of appearance."""
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k != "id"}
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return value


async def test_parallel_remote_and_local_children_are_isolated(tmp_path: Path) -> None:
    async def build(world: World) -> None:
        def make(name: str) -> LlmAgent:
            return LlmAgent(
                name=name,
                model=world.scripted(name, [call("mark"), f"{name} done"]),
                tools=[mark],
                instruction=observing(world, name, ("did:left", "did:right")),
            )

        fan = ParallelAgent(name="fan", sub_agents=[await world.child(make("left")), make("right")])
        summary = LlmAgent(name="summary", model=world.scripted("summary", ["summed"]))
        await world.new_session()
        await world.turn(SequentialAgent(name="flow", sub_agents=[fan, summary]))

    local = await _play(build, IN_PROCESS, tmp_path / IN_PROCESS)
    remote = await _play(build, REMOTE, tmp_path / REMOTE)
    for outcome in (local, remote):
        assert outcome["errors"] == []
        assert outcome["state"] == {"did:left": "fan.left", "did:right": "fan.right"}
        assert sorted(set(branches(outcome))) == [
            ("left", "fan.left"),
            ("right", "fan.right"),
            ("summary", ""),
        ]
        # Each child saw its own events only; the summary saw them all.
        for name, other in (("left", "right"), ("right", "left")):
            for request in outcome["seen"][name]:
                assert f"{other} done" not in str(request["contents"])
                assert "'mark'" in str(request["contents"]) or len(request["contents"]) == 1
        seen_by_summary = str(outcome["seen"]["summary"][0]["contents"])
        assert "left done" in seen_by_summary and "right done" in seen_by_summary
    for key in ("events", "stored"):
        assert _per_branch(remote, key) == _per_branch(local, key)
    for name in ("left", "right"):  # the summary's history interleaves as it happened
        assert _without_ids(remote["seen"][name]) == _without_ids(local["seen"][name])


async def test_a_remote_loop_that_escalates_ends_as_in_process(tmp_path: Path) -> None:
    async def build(world: World) -> None:
        inner_worker = LlmAgent(
            name="inner_worker",
            model=world.scripted("inner_worker", ["again", call("exit_loop")]),
            tools=[ExitLoopTool()],
        )
        inner = LoopAgent(name="inner", sub_agents=[inner_worker], max_iterations=4)
        sibling = LlmAgent(name="sibling", model=world.scripted("sibling", ["sibling ran"]))
        outer = LoopAgent(
            name="outer", sub_agents=[await world.child(inner), sibling], max_iterations=2
        )
        await world.new_session()
        await world.turn(outer)

    outcome = await _both(build, tmp_path)
    assert outcome["errors"] == []
    # As in google-adk: the escalation ends the enclosing loop too.
    assert authors(outcome) == ["inner_worker"] * 3
    assert outcome["seen"]["sibling"] == []


async def test_end_invocation_from_a_remote_before_agent_callback(tmp_path: Path) -> None:
    async def build(world: World) -> None:
        def stop(callback_context: CallbackContext) -> Content:
            callback_context.invocation_context.end_invocation()
            return Content.from_text("model", "stopped here")

        first = LlmAgent(
            name="first", model=world.scripted("first", ["never"]), before_agent_callback=stop
        )
        loop = LoopAgent(
            name="loop",
            sub_agents=[
                await world.child(first),
                LlmAgent(name="next", model=world.scripted("next", ["never"])),
            ],
            max_iterations=3,
        )
        await world.new_session()
        await world.turn(loop)

    outcome = await _both(build, tmp_path)
    assert outcome["errors"] == []
    assert texts(outcome) == ["stopped here"]
    assert outcome["seen"]["first"] == [] and outcome["seen"]["next"] == []


class _Escalator(BaseAgent):
    """Yields one event that only escalates (no content), then one more that does not."""

    async def _run_impl(self, ctx: InvocationContext) -> AsyncGenerator[Event, None]:
        yield Event.new(
            author=self.name,
            invocation_id=ctx.invocation_id,
            branch=ctx.branch,
            actions=EventActions(escalate=True, state_delta={"escalated_by": self.name}),
        )
        yield Event.new(
            author=self.name,
            invocation_id=ctx.invocation_id,
            branch=ctx.branch,
            content=Content.from_text("model", "after the escalation"),
        )


async def test_a_bare_escalation_in_a_remote_sequence_ends_the_loop_after_the_step(
    tmp_path: Path,
) -> None:
    async def build(world: World) -> None:
        tail = LlmAgent(name="tail", model=world.scripted("tail", ["tail ran"]))
        step = SequentialAgent(name="step", sub_agents=[_Escalator(name="escalator"), tail])
        never = LlmAgent(name="never", model=world.scripted("never", ["never"]))
        loop = LoopAgent(name="loop", sub_agents=[await world.child(step), never])
        await world.new_session()
        await world.turn(loop)

    outcome = await _both(build, tmp_path)
    assert outcome["errors"] == []
    # A SequentialAgent does not stop on an escalation; the enclosing loop stops after the step.
    assert authors(outcome) == ["escalator", "escalator", "tail"]
    assert outcome["events"][0]["actions"]["escalate"] is True
    assert outcome["seen"]["never"] == []
    assert outcome["state"] == {"escalated_by": "escalator"}


async def test_temp_state_of_a_local_step_reaches_a_remote_step_and_is_not_stored(
    tmp_path: Path,
) -> None:
    async def build(world: World) -> None:
        first = LlmAgent(
            name="first",
            model=world.scripted("first", [call("bump"), "bumped", "idle"]),
            tools=[bump],
        )
        second = LlmAgent(
            name="second",
            model=world.scripted("second", ["read", "read again"]),
            instruction=observing(world, "second", ("count", "temp:scratch")),
        )
        flow = SequentialAgent(name="flow", sub_agents=[first, await world.child(second)])
        await world.new_session()
        await world.turn(flow)
        await world.turn(flow)

    outcome = await _both(build, tmp_path)
    assert outcome["errors"] == []
    assert outcome["observed"] == [  # temp: holds for its invocation only
        ["second", {"count": 1, "temp:scratch": "round 1"}],
        ["second", {"count": 1, "temp:scratch": None}],
    ]
    assert "temp:scratch" not in outcome["state"]

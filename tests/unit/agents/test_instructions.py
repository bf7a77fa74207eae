"""LlmAgent instructions: global_instruction, static_instruction and {artifact.NAME} templates."""

from __future__ import annotations

from typing import Any

import pytest

from adk_mesh import AgentError, Content, LlmAgent, ReadonlyContext, Runner
from adk_mesh.artifacts.memory import InMemoryArtifactService
from adk_mesh.models.base import TURN_INSTRUCTION_MARK
from adk_mesh.models.offline import OfflineModel
from adk_mesh.sessions.memory import InMemorySessionService
from adk_mesh.testing import ScriptedModel, call
from adk_mesh.types import Part


async def run_turn(
    agent: LlmAgent,
    message: str = "hi",
    *,
    state: dict[str, Any] | None = None,
    artifacts: dict[str, Part] | None = None,
    artifact_service: InMemoryArtifactService | None = None,
) -> None:
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u", state=state)
    if artifacts is not None:
        artifact_service = artifact_service or InMemoryArtifactService()
        for name, part in artifacts.items():
            await artifact_service.save_artifact(
                app_name="app", user_id="u", session_id=session.id, filename=name, artifact=part
            )
    runner = Runner(
        agent=agent, app_name="app", session_service=service, artifact_service=artifact_service
    )
    async for _ in runner.run(
        user_id="u", session_id=session.id, new_message=Content.from_text("user", message)
    ):
        pass


async def test_global_instruction_of_the_root_comes_first_for_every_agent_of_the_tree() -> None:
    child_model = ScriptedModel(["child here"])
    child = LlmAgent(name="child", model=child_model, instruction="You are the child.")
    root_model = ScriptedModel([call("transfer_to_agent", {"agent_name": "child"})])
    root = LlmAgent(
        name="root",
        model=root_model,
        global_instruction="Always answer in {language}.",
        instruction="You route.",
        sub_agents=[child],
    )

    await run_turn(root, state={"language": "Portuguese"})

    root_system = root_model.requests[0].system_instruction or ""
    child_system = child_model.requests[0].system_instruction or ""
    assert root_system.startswith("Always answer in Portuguese.\n\nYou route.")
    assert child_system.startswith("Always answer in Portuguese.\n\nYou are the child.")


async def test_a_callable_global_instruction_is_not_templated() -> None:
    def provider(ctx: ReadonlyContext) -> str:
        return f"Agent {ctx.agent_name} says {{literal}}."

    model = ScriptedModel(["ok"])
    await run_turn(LlmAgent(name="solo", model=model, global_instruction=provider))

    assert model.requests[0].system_instruction == "Agent solo says {literal}."


async def test_static_instruction_is_sent_unchanged_and_the_dynamic_one_goes_to_the_contents() -> (
    None
):
    model = ScriptedModel(["one", "two"])
    agent = LlmAgent(
        name="cached",
        model=model,
        global_instruction="Be kind.",
        static_instruction="Reference: {not_a_placeholder} stays as written.",
        instruction="The user is {name}.",
    )
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u", state={"name": "Ana"})
    runner = Runner(agent=agent, app_name="app", session_service=service)
    for text in ("first", "second"):
        async for _ in runner.run(
            user_id="u", session_id=session.id, new_message=Content.from_text("user", text)
        ):
            pass

    first, second = model.requests
    expected = "Be kind.\n\nReference: {not_a_placeholder} stays as written."
    assert first.system_instruction == second.system_instruction == expected
    # The dynamic instruction sits right before the user's newest message, labelled.
    *_, instruction, newest = second.contents
    assert instruction.role == "user"
    assert instruction.text == f"{TURN_INSTRUCTION_MARK}\nThe user is Ana."
    assert newest.text == "second"
    # Earlier turns' contents carry no instruction.
    assert sum(TURN_INSTRUCTION_MARK in c.text for c in second.contents) == 1


async def test_with_a_static_instruction_tool_results_stay_next_to_their_call() -> None:
    def lookup(city: str) -> dict[str, Any]:
        """Look a city up."""
        return {"country": "Japan"}

    model = ScriptedModel([call("lookup", {"city": "Kyoto"}), "Japan."])
    agent = LlmAgent(
        name="cached",
        model=model,
        tools=[lookup],
        static_instruction="Static.",
        instruction="Dynamic.",
    )

    await run_turn(agent, "Where is Kyoto?")

    first, second = (
        [(c.role, TURN_INSTRUCTION_MARK in c.text) for c in request.contents]
        for request in model.requests
    )
    assert first == [("user", True), ("user", False)]
    # Going on from tool results, it comes after them: each call stays next to its response.
    assert second == [("user", False), ("model", False), ("tool", False), ("user", True)]


async def test_the_offline_model_skips_the_instruction_among_the_contents() -> None:
    def lookup(city: str) -> dict[str, Any]:
        """Look a city up. Keywords: where"""
        return {"summary": f"{city} is in Japan."}

    agent = LlmAgent(
        name="cached",
        model=OfflineModel(),
        tools=[lookup],
        static_instruction="Static.",
        instruction="Dynamic.",
        output_key="answer",
    )
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    runner = Runner(agent=agent, app_name="app", session_service=service)
    async for _ in runner.run(
        user_id="u",
        session_id=session.id,
        new_message=Content.from_text("user", 'Where is "Kyoto"?'),
    ):
        pass
    stored = await service.get_session(app_name="app", user_id="u", session_id=session.id)

    assert stored is not None
    assert stored.state["answer"] == "[offline model] Kyoto is in Japan."


# --------------------------------------------------------------------------- artifacts


async def test_artifact_placeholders_load_the_artifacts_text() -> None:
    model = ScriptedModel(["ok"])
    agent = LlmAgent(
        name="reader",
        model=model,
        instruction="Notes: {artifact.notes.txt}\nData: {artifact.data}\nGone: [{artifact.gone?}]",
    )

    await run_turn(
        agent,
        artifacts={
            "notes.txt": Part(text="buy milk"),
            "data": Part.from_inline_data("application/json", b'{"a": 1}'),
        },
    )

    assert model.requests[0].system_instruction == 'Notes: buy milk\nData: {"a": 1}\nGone: []'


async def test_the_newest_version_of_an_artifact_is_loaded() -> None:
    model = ScriptedModel(["ok"])
    artifacts = InMemoryArtifactService()
    service = InMemorySessionService()
    session = await service.create_session(app_name="app", user_id="u")
    for text in ("v0", "v1"):
        await artifacts.save_artifact(
            app_name="app",
            user_id="u",
            session_id=session.id,
            filename="n",
            artifact=Part(text=text),
        )
    runner = Runner(
        agent=LlmAgent(name="reader", model=model, instruction="{artifact.n}"),
        app_name="app",
        session_service=service,
        artifact_service=artifacts,
    )
    async for _ in runner.run(
        user_id="u", session_id=session.id, new_message=Content.from_text("user", "hi")
    ):
        pass

    assert model.requests[0].system_instruction == "v1"


@pytest.mark.parametrize(
    ("artifacts", "message"),
    [
        (
            {},
            "uses artifact {artifact.notes}, which does not exist; save it first or write "
            "{artifact.notes?} to make it optional",
        ),
        (None, "but this run has no artifact service"),
        ({"notes": Part.from_inline_data("image/png", b"\x89PNG")}, "is not text (image/png)"),
    ],
)
async def test_a_missing_or_binary_required_artifact_is_a_clear_error(
    artifacts: dict[str, Part] | None, message: str
) -> None:
    agent = LlmAgent(name="reader", model=ScriptedModel([]), instruction="{artifact.notes}")

    with pytest.raises(AgentError) as caught:
        await run_turn(agent, artifacts=artifacts)

    assert message in caught.value.message
    assert "'reader'" in caught.value.message


async def test_an_optional_artifact_without_an_artifact_service_is_empty() -> None:
    model = ScriptedModel(["ok"])
    await run_turn(LlmAgent(name="reader", model=model, instruction="[{artifact.notes?}]"))

    assert model.requests[0].system_instruction == "[]"


async def test_state_placeholders_still_work_and_other_braces_stay() -> None:
    model = ScriptedModel(["ok"])
    agent = LlmAgent(
        name="t",
        model=model,
        instruction='{user:name} {missing?} {"json": true}',
    )
    await run_turn(agent, state={"user:name": "Bo"})

    assert model.requests[0].system_instruction == 'Bo  {"json": true}'


async def test_a_static_instruction_may_be_a_content_of_text_parts() -> None:
    # As google-adk takes it (a types.Content); its texts joined, sent unchanged.
    model = ScriptedModel(["ok"])
    static = Content(role="user", parts=[Part(text="Rule one."), Part(text="Rule {two}.")])
    await run_turn(LlmAgent(name="a", model=model, static_instruction=static))
    (request,) = model.requests
    assert request.system_instruction == "Rule one.\nRule {two}."


def test_a_static_instruction_with_a_part_that_is_not_text_is_a_config_error() -> None:
    from adk_mesh import ConfigError
    from adk_mesh.types import Blob

    image = Content(role="user", parts=[Part(inline_data=Blob(data=b"x", mime_type="image/png"))])
    with pytest.raises(ConfigError, match="holds a part that is not text"):
        LlmAgent(name="a", model=ScriptedModel([]), static_instruction=image)
    with pytest.raises(ConfigError, match="is text or a Content of text parts, not int"):
        LlmAgent(name="a", model=ScriptedModel([]), static_instruction=3)  # type: ignore[arg-type]

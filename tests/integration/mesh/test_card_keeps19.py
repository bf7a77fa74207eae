"""An AgentCard says whether the agent keeps the conversation as a child of a caller's tree.

A caller's RemoteAgent reads ``AgentCard.keeps_conversation`` and stands for the served agent
under the caller's own root. There, as in one process, an LlmAgent with
``disallow_transfer_to_parent=True`` does not keep the conversation: when it answered last, the
user's next turn goes back to the caller's root. Served as its service's root it has no parent
(and so would keep its own service's conversation), but the card is read by callers that place
it under a parent: the card says what it does there.

Real parts: AgentServers on 127.0.0.1, port 0; the root's Runner on a SQLite session file (the
helpers of ``test_remote_card18``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from adk_mesh.agents.base import BaseAgent
from adk_mesh.agents.llm_agent import LlmAgent
from adk_mesh.mesh import AgentServer
from adk_mesh.testing import ScriptedModel
from tests.integration.mesh.test_remote_card18 import (
    _describe,
    _same_in_process_and_remote,
    _second_turn_authors,
    _two_turns,
)
from tests.integration.mesh.test_remote_resume import Play, _transfer

APP = "app"


async def test_a_served_root_that_may_not_hand_back_says_it_does_not_keep_it() -> None:
    strict = AgentServer(
        LlmAgent(name="strict", model=ScriptedModel([]), disallow_transfer_to_parent=True),
        app_name=APP,
    )
    default = AgentServer(LlmAgent(name="helper", model=ScriptedModel([])), app_name=APP)
    strict_port = await strict.start("127.0.0.1:0")
    default_port = await default.start("127.0.0.1:0")
    try:
        card = await _describe(strict_port)
        assert card.HasField("keeps_conversation")
        assert card.keeps_conversation is False
        card = await _describe(default_port)
        assert card.HasField("keeps_conversation")
        assert card.keeps_conversation is True
    finally:
        await strict.stop(None)
        await default.stop(None)


def _helper(play: Play, *, disallow_transfer_to_parent: bool = False) -> Callable[[], BaseAgent]:
    # A second answer: if the helper answered the second turn, the run would differ.
    model = play.model("helper", ["Helper here.", "Helper again."])

    def build() -> BaseAgent:
        return LlmAgent(
            name="helper",
            description="Helps.",
            model=model,
            disallow_transfer_to_parent=disallow_transfer_to_parent,
        )

    return build


async def test_the_next_turn_goes_to_the_callers_root_as_in_one_process(tmp_path: Path) -> None:
    async def case(play: Play) -> None:
        await _two_turns(
            play,
            _helper(play, disallow_transfer_to_parent=True),
            restarted=True,
            root_answers=[_transfer("helper"), "Root here: nothing else."],
        )

    local, remote = await _same_in_process_and_remote(tmp_path, case)
    assert _second_turn_authors(local) == ["root"]
    assert _second_turn_authors(remote) == ["root"]


async def test_a_helper_that_may_hand_back_still_keeps_the_next_turn(tmp_path: Path) -> None:
    async def case(play: Play) -> None:
        await _two_turns(play, _helper(play), restarted=True, root_answers=[_transfer("helper")])

    local, remote = await _same_in_process_and_remote(tmp_path, case)
    assert _second_turn_authors(local) == ["helper"]
    assert _second_turn_authors(remote) == ["helper"]


def _coordinated(play: Play, *, specialist_hands_back: bool) -> Callable[[], BaseAgent]:
    """A served coordinator (which may hand back) over a specialist that answers the first
    turn; the specialist may not hand back unless ``specialist_hands_back``."""
    coordinator = play.model("coordinator", [_transfer("specialist"), "Coordinator here."])
    specialist = play.model("specialist", ["Specialist here.", "Specialist again."])

    def build() -> BaseAgent:
        return LlmAgent(
            name="coordinator",
            description="Routes to its specialist.",
            model=coordinator,
            sub_agents=[
                LlmAgent(
                    name="specialist",
                    description="Knows one thing.",
                    model=specialist,
                    disallow_transfer_to_parent=not specialist_hands_back,
                )
            ],
        )

    return build


@pytest.mark.parametrize("restarted", [False, True], ids=["same_process", "restarted"])
async def test_a_served_sub_agent_that_may_not_hand_back_leaves_the_turn_to_the_agent_before_it(
    tmp_path: Path, restarted: bool
) -> None:
    """The specialist answered last, two levels down, and may not hand back: in one process
    the next turn goes to the newest author before it that keeps the conversation (the
    coordinator, whose transfer is in the history), as google-adk's Runner walks the history;
    across services the served service picks the same."""

    async def case(play: Play) -> None:
        await _two_turns(
            play,
            _coordinated(play, specialist_hands_back=False),
            restarted=restarted,
            root_answers=[_transfer("coordinator")],
        )

    local, remote = await _same_in_process_and_remote(tmp_path, case)
    assert _second_turn_authors(local) == ["coordinator"]
    assert _second_turn_authors(remote) == ["coordinator"]


async def test_a_served_sub_agent_that_may_hand_back_keeps_the_next_turn(tmp_path: Path) -> None:
    async def case(play: Play) -> None:
        await _two_turns(
            play,
            _coordinated(play, specialist_hands_back=True),
            restarted=True,
            root_answers=[_transfer("coordinator")],
        )

    local, remote = await _same_in_process_and_remote(tmp_path, case)
    assert _second_turn_authors(local) == ["specialist"]
    assert _second_turn_authors(remote) == ["specialist"]

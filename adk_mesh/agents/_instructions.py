"""Instruction templates: ``{key}`` from state, ``{artifact.NAME}`` from the artifact store.

A placeholder is ``{key}`` (a state key, with its ``app:`` / ``user:`` / ``temp:`` prefix if
any) or ``{artifact.NAME}`` (the text of the newest version of artifact ``NAME``); a trailing
``?`` makes it optional: empty when the key is unset or the artifact is missing. A required one
that is missing is an :class:`~adk_mesh.errors.AgentError` naming it. As in google-adk, doubled
braces and spaces around the name do not change that (``{{key}}``, ``{ key }``); braces that hold
neither (JSON examples, a lone ``{{``) are left as they are, and so is a dotted name that is no
state key set (``{user.name}``: not an identifier, so never a state key for google-adk).

Artifacts are read through the invocation's artifact service, the same way a tool's
``load_artifact`` reads them: in a delegated run served by another service that is the
caller's store, over the call, within the delegation's artifact prefixes.
"""

from __future__ import annotations

import re

from adk_mesh.contexts import CallbackContext, ReadonlyContext
from adk_mesh.errors import AgentError
from adk_mesh.models.base import TURN_INSTRUCTION_MARK
from adk_mesh.types import Content, Part

__all__ = ["insert_turn_instruction", "render_instruction"]

# As google-adk reads them (``{+[^{}]*}+``, the name stripped): ``{{key}}`` and ``{ key }``
# are the value of ``key`` too, not ``{value}`` nor text left as written.
_PLACEHOLDER = re.compile(
    r"\{+\s*(?:artifact\.(?P<artifact>[^{}?\s]+)"
    r"|(?P<key>(?:app:|user:|temp:)?[A-Za-z_][A-Za-z0-9_.]*))"
    r"(?P<optional>\?)?\s*\}+"
)
_TEXT_MIME_TYPES = frozenset({"application/json", "application/xml", "application/yaml"})


async def render_instruction(template: str, ctx: ReadonlyContext) -> str:
    """``template`` with its placeholders filled (see the module docstring).

    Raises:
        AgentError: a required state key is unset, a required artifact is missing (or there
            is no artifact service), or an artifact holds binary data.
    """
    matches = list(_PLACEHOLDER.finditer(template))
    if not matches:
        return template
    pieces: list[str] = []
    end = 0
    for match in matches:
        pieces.append(template[end : match.start()])
        pieces.append(await _value(match, ctx))
        end = match.end()
    pieces.append(template[end:])
    return "".join(pieces)


async def _value(match: re.Match[str], ctx: ReadonlyContext) -> str:
    optional = match.group("optional") is not None
    name = match.group("artifact")
    if name is not None:
        return await _artifact_text(name, optional, ctx)
    key = match.group("key")
    values = ctx.state
    if key in values:
        value = values[key]
        return "" if value is None else str(value)
    if "." in key:
        # Not an identifier: google-adk leaves such braces as written (``{user.name}`` in a
        # quoted template); only a state key of that name, when set, fills them.
        return match.group(0)
    if optional:
        return ""
    raise AgentError(
        f"the instruction of agent {ctx.agent_name!r} uses state key {{{key}}}, which is "
        f"not set; set it first or write {{{key}?}} to make it optional"
    )


async def _artifact_text(name: str, optional: bool, ctx: ReadonlyContext) -> str:
    invocation = ctx.invocation_context
    part: Part | None = None
    if invocation.artifact_service is not None:
        part = await CallbackContext(invocation).load_artifact(name)
    if part is None:
        if optional:
            return ""
        where = (
            "which does not exist"
            if invocation.artifact_service is not None
            else "but this run has no artifact service"
        )
        raise AgentError(
            f"the instruction of agent {ctx.agent_name!r} uses artifact {{artifact.{name}}}, "
            f"{where}; save it first or write {{artifact.{name}?}} to make it optional"
        )
    if part.text is not None:
        return part.text
    blob = part.inline_data
    if blob is not None and (
        blob.mime_type.startswith("text/") or blob.mime_type in _TEXT_MIME_TYPES
    ):
        try:
            return blob.data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    kind = blob.mime_type if blob is not None else part.kind
    raise AgentError(
        f"the instruction of agent {ctx.agent_name!r} uses artifact {{artifact.{name}}}, "
        f"which is not text ({kind}); an instruction can only hold text"
    )


def insert_turn_instruction(contents: list[Content], instruction: str) -> None:
    """Put the dynamic instruction of an agent with a static one into ``contents``: before the
    trailing run of the user's own messages (so they stay last), or at the end when the
    request goes on from tool results (so each call stays next to its response)."""
    at = len(contents)
    while at > 0:
        previous = contents[at - 1]
        if previous.role != "user" or previous.function_responses:
            break
        at -= 1
    contents.insert(
        at, Content(role="user", parts=[Part(text=f"{TURN_INSTRUCTION_MARK}\n{instruction}")])
    )

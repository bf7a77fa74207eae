"""ServerLimits: what one mesh server allows its callers, whatever they ask for."""

from __future__ import annotations

import dataclasses
import math

from adk_mesh.contexts import (
    DEFAULT_MAX_DELEGATION_DEPTH,
    DEFAULT_MAX_LLM_CALLS,
    DEFAULT_TOOL_TIMEOUT,
)
from adk_mesh.errors import ConfigError
from adk_mesh.ids import MAX_ID_CHARS

__all__ = ["LLM_CALLS_TRAILER", "ServerLimits", "llm_calls_in"]

#: Trailing metadata of a delegated ``Run``: the model calls it made (its own and those of the
#: runs it delegated to), which the caller adds to its invocation's count.
LLM_CALLS_TRAILER = "adk-mesh-llm-calls"

#: The largest limit the mesh carries (its fields are int32).
_MAX_INT32 = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class ServerLimits:
    """The limits an :class:`~adk_mesh.mesh.AgentServer` or :class:`~adk_mesh.mesh.ToolServer`
    owns. A request may ask for less, never for more; a request that names a negative limit,
    or an id outside the id rule (:mod:`adk_mesh.ids`), is refused with INVALID_ARGUMENT
    before anything is read or written.

    ========================  =======  =============================================================
    field                     default  meaning
    ========================  =======  =============================================================
    ``max_llm_calls``         500      model calls in one invocation, this service's agents and the
                                       agents they delegate to together. ``RunConfig.max_llm_calls``
                                       of a request lowers it (0: this limit); a delegated run gets
                                       what its caller has left. Reached: RESOURCE_EXHAUSTED
                                       (:class:`~adk_mesh.errors.LlmCallLimitError`).
    ``max_delegation_depth``  8        nested delegations (AgentTool, across services). A delegated
                                       run's ``max_delegation_depth`` lowers it (0: this limit);
                                       deeper: FAILED_PRECONDITION
                                       (:class:`~adk_mesh.errors.DelegationError`).
    ``max_id_chars``          128      longest app, user, session and invocation id a request may
                                       carry (the stores never take more than 128).
    ``tool_timeout``          600.0    seconds one tool call may run, for the tools this service
                                       runs itself (its agents' local tools, a ToolServer's tools)
                                       and the remote ones its agents call; a tool may set a
                                       timeout of its own. Past it the model reads a ToolError.
    ========================  =======  =============================================================

    Raises:
        ConfigError: a limit below 1 (or ``max_llm_calls`` or ``max_delegation_depth`` above
            2**31 - 1, ``max_id_chars`` above 128, ``tool_timeout`` not a positive finite
            number).
    """

    max_llm_calls: int = DEFAULT_MAX_LLM_CALLS
    max_delegation_depth: int = DEFAULT_MAX_DELEGATION_DEPTH
    max_id_chars: int = MAX_ID_CHARS
    tool_timeout: float = DEFAULT_TOOL_TIMEOUT

    def __post_init__(self) -> None:
        # Both travel as int32 (RunConfig.max_llm_calls, DelegatedRun.max_delegation_depth):
        # a larger one would start a server whose every run fails.
        if not 1 <= self.max_llm_calls <= _MAX_INT32:
            raise ConfigError(f"max_llm_calls must be 1 to {_MAX_INT32}, not {self.max_llm_calls}")
        if not 1 <= self.max_delegation_depth <= _MAX_INT32:
            raise ConfigError(
                f"max_delegation_depth must be 1 to {_MAX_INT32}, not {self.max_delegation_depth}"
            )
        if not 1 <= self.max_id_chars <= MAX_ID_CHARS:
            raise ConfigError(
                f"max_id_chars must be 1 to {MAX_ID_CHARS} (what every store takes), "
                f"not {self.max_id_chars}"
            )
        if not (self.tool_timeout > 0 and math.isfinite(self.tool_timeout)):
            raise ConfigError(f"tool_timeout must be positive seconds, not {self.tool_timeout}")

    def llm_calls_for(self, requested: int) -> int:
        """The model calls an invocation gets when its request asks for ``requested`` (0: none
        asked): never more than this server's limit."""
        if requested <= 0:
            return self.max_llm_calls
        return min(requested, self.max_llm_calls)

    def delegation_depth_for(self, requested: int) -> int:
        """The delegation depth a run gets when its caller allows ``requested`` (0: no limit
        sent): never more than this server's."""
        if requested <= 0:
            return self.max_delegation_depth
        return min(requested, self.max_delegation_depth)


def llm_calls_in(metadata: object) -> int:
    """The model calls a delegated run reported in its trailing ``metadata`` (0 when it
    reported none, or nonsense)."""
    for item in metadata or ():  # type: ignore[attr-defined]
        key, value = item
        # ASCII digits only ("²" is a digit to isdigit(), not to int()), and no more of them
        # than a count can have: int() refuses over 4,300 digits, and more than ten is past
        # any limit anyway.
        if key == LLM_CALLS_TRAILER and isinstance(value, str) and value.isascii():
            if value.isdigit():
                digits = value.lstrip("0") or "0"
                return _MAX_INT32 if len(digits) > 10 else min(int(digits), _MAX_INT32)
    return 0

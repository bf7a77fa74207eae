"""The offline model: a deterministic stand-in for an LLM, and the model a service picks by env.

:class:`OfflineModel` is **not** a language model. It follows fixed, documented keyword rules
over the latest user message and the tool and transfer declarations it is given, so a mesh
runs end to end with no network and no key. Every answer it writes starts with
``[offline model]`` so that it is never taken for an LLM's.

The rules, applied to each request in this order:

1. **Tool results come back** — the newest content holds function responses (the agent's own
   tool calls were answered):

   * if ``exit_loop`` is declared and a response has a truthy ``approved`` (or ``done``)
     field, call ``exit_loop``;
   * otherwise answer with text composed from the responses: per response its ``error``
     (``"<tool> failed: ..."``), else its ``summary`` string, else its ``result`` string, else
     loaded artifacts (``artifacts``) as each name and its content, else its fields as
     ``key: value`` lines.

2. **A user message** — the latest user message (contents starting "For context:", which carry
   other agents' turns, and an agent's instruction carried among the contents
   (:data:`~adk_mesh.models.base.TURN_INSTRUCTION_MARK`) are skipped, here and in rule 1).
   Every candidate gets a score: the number of its keywords found in the message. Candidates
   are the declared tools (``transfer_to_agent`` and ``exit_loop`` excepted) and the agents
   ``transfer_to_agent`` may name (their descriptions are read from the ``- name: description``
   lines of the system instruction). A candidate's keywords are the comma-separated words after
   ``Keywords:`` in its description; without that line, the words of its name (``check_fares``
   -> check, fares). ``load_artifacts`` also answers to load, open, read, show and note. A
   keyword matches a word of the message that equals it or extends it by up to three letters
   (fare -> fares); a keyword of several words matches as a phrase. The best score wins, a tool
   before an agent on a tie, then declaration order. Nothing scores: a help answer listing the
   keywords.

3. **A transfer** is a ``transfer_to_agent`` call with the winning agent's name.

4. **A tool call** gets its arguments from the message, parameter by parameter (the required
   ones first, in their listed order):

   * ``request``, ``query``, ``question``, ``message``: the whole message;
   * ``expression``: the arithmetic in the message (digits, ``+ - * / ( ) . ^ %``);
   * a string with an ``enum``: the enum values found in the message, in the order they
     appear, each used once, handed out in parameter order;
   * an array of enum strings: every enum value found in the message;
   * ``integer`` / ``number``: the numbers of the message, in order (``3-day`` -> 3);
   * an array of strings: the file names (``name.ext``) and quoted phrases of the message;
   * any other string: the next quoted phrase (``"..."``).

   An optional parameter without a value is left out. A required one without a value makes
   the model ask for it instead of calling the tool.

5. **Structured output** — with a response schema (an agent's ``output_schema``), every answer
   the rules above would write as text is written as JSON of that schema instead: each
   property filled as tool arguments are (rule 4) from the latest user message, and what that
   leaves unfilled by type: a string gets the text answer (so it still starts with
   ``[offline model]``), a string with an ``enum`` its first value, a number ``0``, a boolean
   ``false``, an array ``[]``, an object its own properties filled the same way, a value that
   can only be null ``null``. Function calls stay function calls.

:func:`model_from_env` picks the model a service uses: ``ADK_MESH_MODEL`` when set
(``offline`` names this model), else the provider whose key is set (``GOOGLE_API_KEY`` /
``GEMINI_API_KEY``, ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``OLLAMA_HOST``, in that
order), else the offline model.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from adk_mesh.models.base import TURN_INSTRUCTION_MARK, Llm, LlmRequest
from adk_mesh.types import Content, FinishReason, FunctionResponse, LlmResponse, Part

__all__ = [
    "DEFAULT_PROVIDER_MODELS",
    "OFFLINE_PREFIX",
    "OfflineModel",
    "choose_model",
    "model_from_env",
]

#: How every answer of the offline model starts.
OFFLINE_PREFIX = "[offline model]"

#: The model each provider key selects when ``ADK_MESH_MODEL`` does not name one.
DEFAULT_PROVIDER_MODELS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("GOOGLE_API_KEY", "GEMINI_API_KEY"), "gemini/gemini-2.5-flash"),
    (("OPENAI_API_KEY",), "openai/gpt-4o-mini"),
    (("ANTHROPIC_API_KEY",), "anthropic/claude-haiku-4-5"),
    (("OLLAMA_HOST",), "ollama/llama3.2"),
)

_TRANSFER = "transfer_to_agent"
_EXIT_LOOP = "exit_loop"
_CONTEXT_MARK = "For context:"
_FREE_TEXT_PARAMETERS = frozenset({"request", "query", "question", "message"})
_BUILTIN_KEYWORDS: Mapping[str, tuple[str, ...]] = {
    "load_artifacts": ("load", "open", "read", "show", "note", "artifact"),
}
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")
_QUOTED = re.compile(r"\"([^\"]+)\"|“([^”]+)”")
_FILE_NAME = re.compile(r"(?<![\w/.-])[\w][\w./-]*\.[A-Za-z0-9]{1,5}\b")
_ARITHMETIC = re.compile(r"[\d(][\d\s.+\-*/()^%]*[\d)]")
_KEYWORDS_LINE = re.compile(r"keywords:\s*([^.]+)", re.IGNORECASE)
_TARGET_LINE = re.compile(r"^- ([A-Za-z_][\w-]*): (.*)$", re.MULTILINE)
_MAX_EXTENSION = 3


@dataclass(frozen=True)
class _Candidate:
    kind: str  # "tool" or "agent"
    name: str
    keywords: tuple[str, ...]
    schema: Mapping[str, Any] | None = None


class OfflineModel(Llm):
    """A deterministic, rule-based stand-in for an LLM (see the module docstring for the
    rules). Answers start with ``[offline model]``; it never claims to be a language model.

    Safe to share between concurrent invocations: it keeps no state between requests.
    """

    def __init__(self, name: str = "offline") -> None:
        super().__init__(name)

    async def generate_content(
        self, request: LlmRequest, *, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        response = self.respond(request)
        if stream and response.content is not None and response.content.text:
            yield LlmResponse(
                content=Content(role="model", parts=[Part(text=response.content.text)]),
                partial=True,
            )
        yield response

    def respond(self, request: LlmRequest) -> LlmResponse:
        """The answer to ``request`` (the rules of the module docstring)."""
        response = self._respond(request)
        schema = request.config.response_schema
        if schema is None or response.content is None or response.content.function_calls:
            return response
        message = _latest_user_message(request.contents)
        value = structured_value(schema, response.content.text, message)
        return LlmResponse(
            content=Content(role="model", parts=[Part(text=json.dumps(value))]),
            finish_reason=FinishReason.STOP,
            turn_complete=True,
            model_version="offline",
        )

    def _respond(self, request: LlmRequest) -> LlmResponse:
        declared = {tool.name for tool in request.tools}
        responses = _latest_function_responses(request.contents)
        if responses:
            if _EXIT_LOOP in declared and any(_approved(r.response) for r in responses):
                return _call(_EXIT_LOOP, {})
            return _text(_compose(responses))
        message = _latest_user_message(request.contents)
        candidates = _candidates(request)
        if not candidates:
            return _text(f"I have no tools here, so I can only echo your message: {message!r}")
        best = _best(candidates, message)
        if best is None:
            return _text(_help(candidates))
        if best.kind == "agent":
            return _call(_TRANSFER, {"agent_name": best.name})
        args, missing = fill_arguments(best.schema, message)
        if missing:
            return _text(
                f"to use {best.name} I need {', '.join(missing)}; please say it in your "
                "message (quote free text in double quotes)."
            )
        return _call(best.name, args)


# --- choosing -----------------------------------------------------------------------------


def _candidates(request: LlmRequest) -> list[_Candidate]:
    tools: list[_Candidate] = []
    agents: list[_Candidate] = []
    for declaration in request.tools:
        if declaration.name == _EXIT_LOOP:
            continue
        if declaration.name == _TRANSFER:
            names = _enum_of(declaration.parameters_schema, "agent_name")
            descriptions = dict(_TARGET_LINE.findall(request.system_instruction or ""))
            for name in names:
                agents.append(
                    _Candidate("agent", name, _keywords(name, descriptions.get(name, "")))
                )
            continue
        keywords = _keywords(declaration.name, declaration.description)
        keywords += _BUILTIN_KEYWORDS.get(declaration.name, ())
        tools.append(_Candidate("tool", declaration.name, keywords, declaration.parameters_schema))
    return tools + agents


def _keywords(name: str, description: str) -> tuple[str, ...]:
    found = _KEYWORDS_LINE.search(description)
    if found:
        words = (" ".join(word.split()).lower() for word in found.group(1).split(","))
        return tuple(word for word in words if word)
    return tuple(word for word in re.split(r"[_\-\s]+", name.lower()) if word)


def _score(keywords: Sequence[str], message: str) -> int:
    text = message.lower()
    words = _WORD.findall(text)
    normalized = " ".join(words)
    score = 0
    for keyword in dict.fromkeys(keywords):
        if " " in keyword:
            if f" {keyword} " in f" {normalized} ":
                score += 1
        elif any(
            word.startswith(keyword) and len(word) - len(keyword) <= _MAX_EXTENSION
            for word in words
        ):
            score += 1
    return score


def _best(candidates: list[_Candidate], message: str) -> _Candidate | None:
    best: _Candidate | None = None
    best_score = 0
    for candidate in candidates:  # tools come first, so they win ties
        score = _score(candidate.keywords, message)
        if score > best_score:
            best, best_score = candidate, score
    return best


def _help(candidates: list[_Candidate]) -> str:
    lines = ["I could not match your message to anything I can do. I answer to these words:"]
    for candidate in candidates:
        what = "hand over to" if candidate.kind == "agent" else "use"
        lines.append(f"- {', '.join(candidate.keywords)}: {what} {candidate.name}")
    return "\n".join(lines)


# --- arguments ----------------------------------------------------------------------------


def fill_arguments(
    schema: Mapping[str, Any] | None, message: str
) -> tuple[dict[str, Any], list[str]]:
    """The arguments the offline rules take from ``message`` for a tool of this JSON Schema,
    and the names of the required parameters left without a value."""
    if not schema:
        return {}, []
    properties: Mapping[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    numbers = [float(n) for n in _NUMBER.findall(message)]
    quoted = [a or b for a, b in _QUOTED.findall(message)]
    enum_mentions = _mentions(message)
    used_enums: set[str] = set()
    args: dict[str, Any] = {}
    missing: list[str] = []
    # Required parameters in their listed order first: a schema that crossed the wire as a
    # protobuf Struct has its properties sorted by name, while ``required`` keeps its order.
    names = [n for n in schema.get("required") or () if n in properties]
    names += [n for n in properties if n not in names]
    for name in names:
        prop = _concrete(properties[name])
        kind = prop.get("type")
        value: Any = None
        if name in _FREE_TEXT_PARAMETERS and kind in (None, "string"):
            value = message.strip() or None
        elif name == "expression":
            found = _ARITHMETIC.findall(message)
            value = max(found, key=len).strip() if found else None
        elif "enum" in prop:
            value = _next_enum(prop["enum"], enum_mentions, used_enums)
        elif kind == "array" and "enum" in _concrete(prop.get("items") or {}):
            options = _concrete(prop["items"])["enum"]
            value = [option for option in options if enum_mentions(str(option)) is not None]
            value = sorted(value, key=lambda option: enum_mentions(str(option)) or 0) or None
        elif kind in ("integer", "number"):
            if numbers:
                number = numbers.pop(0)
                value = int(number) if kind == "integer" else number
        elif kind == "array":
            files = _FILE_NAME.findall(message)
            value = list(dict.fromkeys([*files, *quoted])) or None
        elif kind == "string" and quoted:
            value = quoted.pop(0)
        if value is None:
            if name in required:
                missing.append(name)
            continue
        args[name] = value
    return args, missing


def structured_value(schema: Mapping[str, Any], text: str, message: str) -> Any:
    """A value of ``schema`` as the offline rules write it (rule 5 of the module docstring):
    properties filled from ``message`` as tool arguments are, the rest by type, strings with
    ``text``."""
    schema = _concrete(schema)
    kind = schema.get("type")
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "object" or "properties" in schema:
        properties: Mapping[str, Any] = schema.get("properties") or {}
        value, _ = fill_arguments(schema, message)
        for name, prop in properties.items():
            if name not in value:
                value[name] = structured_value(prop, text, message)
        return value
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 0
    if kind == "boolean":
        return False
    if kind == "null" or _nullable(schema):
        return None
    return text


def _nullable(schema: Mapping[str, Any]) -> bool:
    return any(
        isinstance(alternative, Mapping) and alternative.get("type") == "null"
        for alternative in schema.get("anyOf") or ()
    )


def _concrete(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """The first non-null alternative of an ``anyOf`` (an Optional parameter)."""
    for alternative in schema.get("anyOf") or ():
        if isinstance(alternative, Mapping) and alternative.get("type") != "null":
            return alternative
    return schema


def _mentions(message: str) -> Callable[[str], int | None]:
    """A function: where an enum value first appears in the message (None: nowhere)."""
    text = message.lower()

    def position(value: str) -> int | None:
        found = re.search(rf"(?<![\w-]){re.escape(value.lower())}(?![\w-])", text)
        return found.start() if found else None

    return position


def _next_enum(
    options: Sequence[Any], mentions: Callable[[str], int | None], used: set[str]
) -> Any:
    placed = [
        (position, option)
        for option in options
        if str(option) not in used and (position := mentions(str(option))) is not None
    ]
    if not placed:
        return None
    # The earliest mention; of two at the same place, the longer ("New York" before "York").
    placed.sort(key=lambda item: (item[0], -len(str(item[1]))))
    chosen = placed[0][1]
    used.add(str(chosen))
    return chosen


def _enum_of(schema: Mapping[str, Any] | None, name: str) -> list[str]:
    if not schema:
        return []
    prop = (schema.get("properties") or {}).get(name) or {}
    return [str(value) for value in prop.get("enum") or ()]


# --- reading the conversation ---------------------------------------------------------------


def _is_turn_instruction(content: Content) -> bool:
    first = content.parts[0].text if content.parts else None
    return first is not None and first.startswith(TURN_INSTRUCTION_MARK)


def _latest_function_responses(contents: Sequence[Content]) -> list[FunctionResponse]:
    for content in reversed(contents):
        if not _is_turn_instruction(content):
            return content.function_responses
    return []


def _latest_user_message(contents: Sequence[Content]) -> str:
    for content in reversed(contents):
        if content.role != "user" or content.function_responses:
            continue
        texts = [part.text for part in content.parts if part.text is not None]
        if texts and texts[0].startswith((_CONTEXT_MARK, TURN_INSTRUCTION_MARK)):
            continue
        text = " ".join(texts).strip()
        if text:
            return text
    return ""


def _approved(response: Mapping[str, Any]) -> bool:
    return bool(response.get("approved") or response.get("done"))


def _compose(responses: Sequence[FunctionResponse]) -> str:
    pieces: list[str] = []
    for response in responses:
        body = response.response
        if body.get("error"):
            pieces.append(f"{response.name} failed: {body['error']}")
        elif isinstance(body.get("summary"), str):
            pieces.append(body["summary"])
        elif isinstance(body.get("result"), str):
            pieces.append(body["result"].removeprefix(OFFLINE_PREFIX).strip())
        elif isinstance(body.get("artifacts"), list):
            for item in body["artifacts"]:
                if not isinstance(item, Mapping):
                    continue
                shown = item.get("content", item.get("error", ""))
                shown = shown if isinstance(shown, str) else json.dumps(shown, default=str)
                pieces.append(f"{item.get('name')}:\n{shown}")
        else:
            lines = [
                f"{key}: {value if isinstance(value, str) else json.dumps(value, default=str)}"
                for key, value in body.items()
            ]
            pieces.append(f"{response.name} returned:\n" + "\n".join(lines))
    return "\n\n".join(pieces)


def _text(text: str) -> LlmResponse:
    return LlmResponse(
        content=Content(role="model", parts=[Part(text=f"{OFFLINE_PREFIX} {text}")]),
        finish_reason=FinishReason.STOP,
        turn_complete=True,
        model_version="offline",
    )


def _call(name: str, args: dict[str, Any]) -> LlmResponse:
    return LlmResponse(
        content=Content(role="model", parts=[Part.from_function_call(name, args)]),
        finish_reason=FinishReason.TOOL_CALLS,
        turn_complete=True,
        model_version="offline",
    )


# --- choosing a model from the environment --------------------------------------------------


def choose_model(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """Which model :func:`model_from_env` would build: ``(model string, why)``.

    The model string is ``"offline"`` for the offline model.
    """
    env = os.environ if environ is None else environ
    override = env.get("ADK_MESH_MODEL", "").strip()
    if override:
        return override, "ADK_MESH_MODEL is set"
    for variables, model in DEFAULT_PROVIDER_MODELS:
        for variable in variables:
            if env.get(variable, "").strip():
                return model, f"{variable} is set"
    return "offline", "no provider key is set"


def model_from_env(environ: Mapping[str, str] | None = None) -> Llm:
    """The model a service uses: ``ADK_MESH_MODEL``, else the provider whose key is set, else
    the offline model. Raises :class:`~adk_mesh.errors.ConfigError` for an unknown model
    string."""
    model, _ = choose_model(environ)
    if model.lower() == "offline":
        return OfflineModel()
    from adk_mesh.models.registry import resolve_model

    return resolve_model(model)

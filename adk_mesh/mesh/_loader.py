"""Load what a service serves from a ``MODULE:ATTR`` reference (``my_app.agents:root_agent``).

The current directory is put on ``sys.path`` first, as ``python -m`` would, so a service can
be started from its project directory without installing it. Every failure is a
:class:`~adk_mesh.errors.ConfigError` whose message says what was looked for and what was found.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

from adk_mesh.agents.base import BaseAgent
from adk_mesh.errors import ConfigError
from adk_mesh.tools.base import BaseTool, Toolset
from adk_mesh.tools.function_tool import FunctionTool

__all__ = ["load_agent", "load_object", "load_tools"]


def load_object(reference: str) -> Any:
    """The object ``MODULE:ATTR`` names; ``ATTR`` may be dotted (``module:holder.agent``)."""
    module_name, separator, attribute_path = reference.partition(":")
    if not separator or not module_name or not attribute_path:
        raise ConfigError(
            f"{reference!r} is not a MODULE:ATTR reference; write e.g. my_app.agents:root_agent"
        )
    if "/" in module_name or "\\" in module_name:
        raise _file_path_error(module_name, attribute_path)
    if module_name.startswith("."):
        # import_module would raise a TypeError about its ``package`` argument.
        raise ConfigError(
            f"{module_name!r} is a relative module name: write the module's full dotted name "
            f"(e.g. my_app{module_name}:{attribute_path})"
        )
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if missing == module_name and module_name.endswith(".py"):
            raise _file_path_error(module_name, attribute_path) from error
        if missing == module_name or module_name.startswith(f"{missing}."):
            raise ConfigError(
                f"cannot import module {module_name!r} of {reference!r}: no module named "
                f"{missing!r} (searched the current directory {cwd} and sys.path)"
            ) from error
        raise ConfigError(
            f"importing module {module_name!r} failed: it needs {missing!r}, which is not installed"
        ) from error
    except SystemExit as error:
        # A script without an ``if __name__ == "__main__"`` guard: its exit would end the
        # command silently, with the script's exit code.
        raise ConfigError(
            f"importing module {module_name!r} called sys.exit({error.code!r}); run its "
            'script code only under `if __name__ == "__main__":`'
        ) from error
    except Exception as error:
        raise ConfigError(
            f"importing module {module_name!r} raised {type(error).__name__}: {error}"
        ) from error
    value: Any = module
    walked = module_name
    for name in attribute_path.split("."):
        reading = f"{walked}:{name}" if walked == module_name else f"{walked}.{name}"
        try:
            value = getattr(value, name)
        except AttributeError:
            defined = sorted(n for n in dir(value) if not n.startswith("_"))
            listing = ", ".join(defined[:20]) + (", ..." if len(defined) > 20 else "")
            raise ConfigError(
                f"{walked!r} has no attribute {name!r} (from {reference!r}); "
                f"it defines: {listing or 'nothing public'}"
            ) from None
        except Exception as error:
            # A lazy attribute (a module's __getattr__, a property) whose import or code fails.
            raise ConfigError(
                f"reading {reading} raised {type(error).__name__}: {error}"
            ) from error
        walked = reading
    return value


def _file_path_error(module_name: str, attribute_path: str) -> ConfigError:
    """The error of a file path given for the module (``agents/weather.py``), with the dotted
    name to write instead."""
    path = module_name.replace("\\", "/").removesuffix(".py")
    if path.startswith("/"):
        directory, _, name = path.rpartition("/")
        return ConfigError(
            f"{module_name!r} is a file path, not a module name: write {name}:{attribute_path} "
            f"and start the command in {directory or '/'}"
        )
    dotted = ".".join(part for part in path.split("/") if part not in ("", "."))
    return ConfigError(
        f"{module_name!r} is a file path, not a module name: write {dotted}:{attribute_path} "
        "(the module's dotted name, from the directory it is started in)"
    )


def _call_factory(reference: str, factory: Callable[..., Any], wanted: str) -> Any:
    async_factory = ConfigError(
        f"{reference} is an async function; name a plain (def) function that returns it, "
        "or the object itself"
    )
    if inspect.iscoroutinefunction(factory):
        # Called, it would only make a coroutine, never awaited (and warned about at exit).
        raise async_factory
    try:
        built = factory()
    except ConfigError:
        raise
    except Exception as error:
        raise ConfigError(
            f"calling {reference}() to build {wanted} raised {type(error).__name__}: {error}"
        ) from error
    if inspect.iscoroutine(built):
        # An async factory that iscoroutinefunction cannot tell (an object with an async
        # __call__): its coroutine, not yet started, is closed so that it never warns.
        built.close()
        raise async_factory
    return built


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:120]


def load_agent(reference: str) -> BaseAgent:
    """A :class:`BaseAgent` named by ``reference``, or built by the zero-argument callable it
    names."""
    value = load_object(reference)
    if isinstance(value, BaseAgent):
        return value
    if callable(value) and not isinstance(value, type):
        built = _call_factory(reference, value, "an agent")
        if isinstance(built, BaseAgent):
            return built
        raise ConfigError(
            f"{reference}() returned {_describe(built)}, not an agent; return a BaseAgent "
            "(e.g. an LlmAgent)"
        )
    raise ConfigError(
        f"{reference!r} is {_describe(value)}, not an agent; name a BaseAgent (e.g. an "
        "LlmAgent) or a zero-argument function that returns one"
    )


def _as_tools(reference: str, value: Any) -> list[BaseTool | Toolset] | Toolset | None:
    if isinstance(value, Toolset):
        return value
    if isinstance(value, BaseTool):
        return [value]
    if isinstance(value, list | tuple):
        tools: list[BaseTool | Toolset] = []
        for index, item in enumerate(value):
            if isinstance(item, BaseTool | Toolset):
                tools.append(item)
            elif inspect.isfunction(item) or inspect.ismethod(item) or inspect.isbuiltin(item):
                tools.append(FunctionTool(item))
            else:
                raise ConfigError(
                    f"item {index} of {reference!r} is {_describe(item)}; every item must be a "
                    "tool (BaseTool), a Toolset or a function"
                )
        if not tools:
            raise ConfigError(f"{reference!r} is an empty list: there is nothing to serve")
        return tools
    return None


def load_tools(reference: str) -> list[BaseTool | Toolset] | Toolset:
    """The tools ``reference`` names: a list of tools, toolsets and plain functions (functions
    become :class:`FunctionTool`), a single tool, a :class:`Toolset`, or a zero-argument
    callable that returns one of these. A single function must be put in a list: a bare callable is
    taken as a factory."""
    value = load_object(reference)
    tools = _as_tools(reference, value)
    if tools is not None:
        return tools
    if callable(value) and not isinstance(value, type):
        built = _call_factory(reference, value, "tools")
        tools = _as_tools(reference, built)
        if tools is not None:
            return tools
        raise ConfigError(
            f"{reference}() returned {_describe(built)}; return a list of tools or functions, "
            "or a Toolset"
        )
    raise ConfigError(
        f"{reference!r} is {_describe(value)}; name a list of tools or functions, a Toolset, "
        "or a zero-argument function that returns one"
    )

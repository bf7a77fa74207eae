"""Ctrl-C that CPython swallows: a SIGINT whose KeyboardInterrupt is raised inside a weakref
callback or a finalizer (importlib's module-lock callbacks run while modules load) cannot
propagate, so CPython prints it as "Exception ignored in ..." with a traceback and goes on —
the command starts as if nobody had pressed Ctrl-C, and a service went on to serve.

:func:`watch` (the ``adk-mesh`` entry point calls it first) takes those reports over: a
swallowed KeyboardInterrupt is noted, not printed, and :func:`swallowed` tells the command's
next checkpoint (the end of loading, a server about to start) to stop as Ctrl-C would have.
Other unraisable exceptions are reported as before.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["swallowed", "watch"]

_swallowed = False


def watch() -> None:
    """Note, rather than print, a KeyboardInterrupt that cannot propagate."""
    sys.unraisablehook = _hook


def swallowed() -> bool:
    """Whether a Ctrl-C was swallowed since :func:`watch` (it stays noted)."""
    return _swallowed


def _hook(report: Any) -> None:
    global _swallowed
    if isinstance(report.exc_value, KeyboardInterrupt):
        _swallowed = True
        return
    sys.__unraisablehook__(report)

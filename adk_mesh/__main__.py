"""``python -m adk_mesh`` and the ``adk-mesh`` console script: the ``adk-mesh`` command.

This module imports nothing at its top: :mod:`adk_mesh.cli` loads grpc, protobuf and pydantic,
about half a second in which Ctrl-C would otherwise end the command with a traceback. The
entry point loads the command inside its own ``try``, so an interrupt at any moment from there
on is the command's usual exit code for it, 130.
"""

from __future__ import annotations

#: The exit code of an interrupted command (128 + SIGINT), as :mod:`adk_mesh.cli` returns it.
EXIT_INTERRUPTED = 130


def main() -> int:
    """The ``adk-mesh`` command with ``sys.argv``; the exit code."""
    try:
        from adk_mesh import _interrupts

        _interrupts.watch()
        from adk_mesh.cli import main as command

        # A Ctrl-C CPython swallowed while the command loaded (see adk_mesh._interrupts).
        code = EXIT_INTERRUPTED if _interrupts.swallowed() else command()
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    _forget_handled_interrupt()
    return code


def _forget_handled_interrupt() -> None:
    """Let the exit code stand after an interrupt the command handled.

    CPython (3.11 to 3.13 at least) notes a KeyboardInterrupt that leaves code run by ``exec``
    of a string (dataclasses and typing build classes so while modules load) even when a
    caller catches it, and under ``python -m`` then ends the process by SIGINT whatever the
    exit code (about one Ctrl-C in ten while loading). Each ``exec`` of a string starts by
    clearing that note.
    """
    exec("")


if __name__ == "__main__":
    raise SystemExit(main())

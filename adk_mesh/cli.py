"""The ``adk-mesh`` command."""

from __future__ import annotations

import argparse
import sys

from adk_mesh import __version__

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="adk-mesh", description="Run ADK agents as a gRPC mesh.")
    parser.add_argument("--version", action="version", version=f"adk-mesh {__version__}")
    parser.parse_args(argv)
    parser.print_help(sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The gateway's OpenAPI 3.1 document, also committed as ``gateway/openapi.json``.

::

    python -m gateway.openapi            # print it
    python -m gateway.openapi --write    # write gateway/openapi.json (make openapi)
    python -m gateway.openapi --check    # exit 1 when it differs (make openapi-check, in CI)

The document does not depend on the apps served or any other setting: it is the API, the
routes of ``gateway/_traces.py`` included (after changing any route: ``make openapi``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["COMMITTED", "document", "main", "text"]

#: Where the committed document lives.
COMMITTED = Path(__file__).resolve().parent / "openapi.json"


def document() -> dict[str, Any]:
    """The OpenAPI document of the gateway's API."""
    from gateway._app import create_app
    from gateway._settings import GatewaySettings

    spec: dict[str, Any] = create_app(GatewaySettings()).openapi()
    return spec


def text() -> str:
    """The document as committed: indented JSON, UTF-8, a final newline."""
    return json.dumps(document(), indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gateway.openapi", description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"write {COMMITTED.name}")
    mode.add_argument("--check", action="store_true", help=f"fail when {COMMITTED.name} differs")
    args = parser.parse_args(argv)
    current = text()
    if args.write:
        COMMITTED.write_text(current, encoding="utf-8")
        print(f"wrote {COMMITTED}")
        return 0
    if args.check:
        committed = COMMITTED.read_text(encoding="utf-8") if COMMITTED.is_file() else ""
        if committed != current:
            print(
                f"{COMMITTED} is not the gateway's current OpenAPI document: run `make openapi` "
                "and commit it",
                file=sys.stderr,
            )
            return 1
        print("gateway/openapi.json is up to date")
        return 0
    sys.stdout.write(current)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

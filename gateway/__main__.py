"""``python -m gateway``: the same as ``adk-mesh gateway``."""

from __future__ import annotations

from gateway.cli import main

raise SystemExit(main())

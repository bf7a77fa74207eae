"""``python -m adk_mesh``: the ``adk-mesh`` command."""

from __future__ import annotations

from adk_mesh.cli import main

raise SystemExit(main())

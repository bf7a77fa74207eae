"""Generate Python messages, gRPC stubs and .pyi stubs from protos/ with grpcio-tools.

The proto tree mirrors the import path (protos/adk_mesh/v1 -> adk_mesh.v1), so the generated
imports are correct as they are and nothing is rewritten afterwards.
"""

from __future__ import annotations

import argparse
import importlib.resources
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PACKAGE = Path("adk_mesh") / "v1"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(ROOT), help="directory that receives adk_mesh/v1")
    out = Path(parser.parse_args().out).resolve()
    (out / PACKAGE).mkdir(parents=True, exist_ok=True)
    well_known = importlib.resources.files("grpc_tools") / "_proto"
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PACKAGE).glob("*.proto"))
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        print("protoc failed", file=sys.stderr)
        return 1
    init = out / PACKAGE / "__init__.py"
    init.write_text('"""Generated protobuf and gRPC code for adk_mesh.v1. Do not edit."""\n')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

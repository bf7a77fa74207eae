"""make deploy-check, for the Compose file: interpolated and merged as podman-compose reads it
(``podman-compose config``), then validated against the Compose Specification by the
compose-spec package (the compose_spec Rust crate's parser: unknown keys, wrong types, bad
conditions, undefined volumes and networks), plus what that parser leaves out: every
``depends_on`` names a service of the file.

    python tests/deploy/check_compose.py FILE [FILE...]   # later files override earlier ones
"""

from __future__ import annotations

import subprocess
import sys

import yaml
from compose_spec import PyCompose


def main(files: list[str]) -> int:
    arguments = [part for path in files for part in ("-f", path)]
    # Interpolation needs the variables the test harness's override file requires.
    result = subprocess.run(
        [sys.executable, "-m", "podman_compose", *arguments, "config"],
        capture_output=True,
        text=True,
        check=False,
        env={"ADK_MESH_TEST_DIR": "/nonexistent", "PATH": "/usr/bin:/bin"},
    )
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"{' + '.join(files)}: podman-compose config failed: {last}")
        return 1
    try:
        PyCompose.from_yaml(result.stdout).validate()
    except ValueError as error:
        print(f"{' + '.join(files)}: not a valid Compose file: {error}")
        return 1
    services = yaml.safe_load(result.stdout)["services"]
    problems = [
        f"service {name!r} depends on {dependency!r}, which is not a service of the file"
        for name, service in services.items()
        for dependency in service.get("depends_on") or {}
        if dependency not in services
    ]
    for problem in problems:
        print(f"{' + '.join(files)}: {problem}")
    if not problems:
        print(f"{' + '.join(files)}: valid ({len(services)} services)")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

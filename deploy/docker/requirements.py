"""Print a project's requirements from its pyproject.toml, one per line (for pip -r).

    python3 requirements.py pyproject.toml [EXTRA,EXTRA...]

The Dockerfile installs these before it copies the source, so the dependency layer is
rebuilt only when pyproject.toml changes. Standard library only: it runs before anything
is installed.
"""

from __future__ import annotations

import sys
import tomllib


def requirements(pyproject: str, extras: str = "") -> list[str]:
    with open(pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    result = list(project.get("dependencies", []))
    optional = project.get("optional-dependencies", {})
    for extra in (e.strip() for e in extras.split(",")):
        if not extra:
            continue
        if extra not in optional:
            raise SystemExit(f"requirements.py: no extra {extra!r} in {pyproject}")
        result.extend(optional[extra])
    return result


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    print("\n".join(requirements(sys.argv[1], sys.argv[2] if len(sys.argv) == 3 else "")))

"""What the package declares: runtime dependencies vs extras, and what its code imports."""

from __future__ import annotations

import ast
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

REPO = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_submitit_is_a_test_dependency_only_and_the_package_never_imports_it():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("submitit") for d in project["dependencies"])
    extras = project["optional-dependencies"]
    assert any(d.startswith("submitit") for d in extras["test"])
    assert any(d.startswith("py-spy") for d in extras["pyspy"])
    assert {"mypy", "ruff"} <= {d.split(">")[0].split("=")[0] for d in extras["dev"]}
    assert any(d.startswith("prometheus_client") for d in project["dependencies"])
    users = [p for p in (REPO / "slurmdiag").rglob("*.py") if "submitit" in imported_modules(p)]
    assert users == []

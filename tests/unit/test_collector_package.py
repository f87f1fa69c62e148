"""The collector as a package: stdlib-only modules shipped as one bundle, run by the loader.

Every module of slurmdiag/collector/ imports only its siblings and the standard library (the
nodes have nothing installed), in Python 3.8's grammar; the transport bundles the modules the
program needs, and a fresh ``python -I -S`` runs the loader on it, compiling on the first run and
loading the node cache on the next.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurmdiag.collector import options as collector_options
from slurmdiag.options import AttachOptions
from slurmdiag.transport.collect import (
    COLLECTOR_LOADER,
    COLLECTOR_PACKAGE,
    collector_args,
    collector_bundle,
    collector_payload,
    package_bundle,
    program_payload,
)
from slurmdiag.transport.framing import decode_frames

PACKAGE = Path(__file__).resolve().parents[2] / "slurmdiag" / "collector"
# Not modules of the collector program: the package's docstring, the node command's -c program,
# the node side of a bundle (sent apart, see loader.py), and doctor's own node program.
NOT_BUNDLED = {"__init__", "loader", "bundle", "doctor_node"}
# C modules the collector uses instead of json, signal, socket and ctypes (start-up cost), and
# the pure-Python ones it imports only off the normal path.
NODE_STDLIB = {
    "_json", "_signal", "_socket", "_struct", "_thread", "select", "posix", "sys", "time",
    "marshal", "zlib", "binascii", "json", "traceback", "_ctypes", "fcntl", "termios",
}


def import_problems(folder: Path) -> list[str]:
    """Each import of a module of ``folder`` that is neither a sibling nor the standard library,
    or (in the modules the collector runs) a pure-Python module it has no reason to load."""
    siblings = {path.stem for path in folder.glob("*.py")}
    problems = []
    for path in sorted(folder.glob("*.py")):
        tree = ast.parse(path.read_text(), feature_version=(3, 8))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                if node.level != 1 or node.module not in siblings:
                    problems.append(f"{path.name}: from {'.' * node.level}{node.module or ''}")
                continue
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names:
                    problems.append(f"{path.name}: import {name} (not the standard library)")
                elif path.stem not in NOT_BUNDLED and top not in NODE_STDLIB:
                    problems.append(f"{path.name}: import {name} (start-up cost on every node)")
    return problems


def test_every_module_imports_only_its_siblings_and_the_standard_library() -> None:
    assert import_problems(PACKAGE) == []


def test_a_module_importing_anything_else_is_refused(tmp_path: Path) -> None:
    # GIVEN a copy of the package with modules that import a third-party module, the
    # controller's code, a module that is not there and os (os.py costs ~1 ms a node)
    copy = tmp_path / "collector"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "gpus.py").write_text((copy / "gpus.py").read_text() + "\nimport requests\n")
    (copy / "nics.py").write_text("from ..transport import collect\n" + (copy / "nics.py").read_text())
    (copy / "flight.py").write_text("from .nosuch import x\nimport os\n" + (copy / "flight.py").read_text())
    # THEN each is named
    assert import_problems(copy) == [
        "flight.py: from .nosuch",
        "flight.py: import os (start-up cost on every node)",
        "gpus.py: import requests (not the standard library)",
        "nics.py: from ..transport",
    ]


def test_the_bundle_holds_every_module_of_the_collector_in_import_order() -> None:
    package, modules = collector_bundle()
    names = [name for name, _ in modules]
    assert package == COLLECTOR_PACKAGE == "slurmdiag.collector"
    assert set(names) == {path.stem for path in PACKAGE.glob("*.py")} - NOT_BUNDLED
    assert names[-1] == "__main__" and len(names) == len(set(names))
    # each module comes after every sibling it imports
    for index, (name, source) in enumerate(modules):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert names.index(node.module) < index, (name, node.module)
    assert [text for _, text in modules] == [(PACKAGE / f"{n}.py").read_text() for n in names]


def test_a_circular_import_is_refused_when_bundling(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "circular_pkg").mkdir()
    for name, body in (("__init__", ""), ("__main__", "from .a import x\n"),
                       ("a", "from .b import y\nx = 1\n"), ("b", "from .a import x\ny = 2\n")):
        (tmp_path / "circular_pkg" / f"{name}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="circular import __main__ -> a -> b -> a"):
        package_bundle("circular_pkg")


def _loader_run(cache: Path, payload: tuple[str, str], args: dict) -> subprocess.CompletedProcess:
    argv = ["/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable,
            "-I", "-S", "-c", COLLECTOR_LOADER, "", str(cache), *payload, json.dumps(args)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin"})


def test_a_fresh_interpreter_compiles_the_bundle_once_then_loads_it_from_the_cache(tmp_path):
    # GIVEN the collector's own modules with a __main__ that lists what the loader installed
    package, modules = collector_bundle()
    probe = ("import sys\nprint(sorted(n for n in sys.modules if n.startswith('slurmdiag')),"
             " __name__, __package__)\nfrom .framing import FORMAT\nprint(FORMAT)\n")
    payload = program_payload((package, (*modules[:-1], ("__main__", probe))))
    # WHEN a fresh interpreter (-I -S) runs the loader on it twice with a node cache
    first = _loader_run(tmp_path, payload, {})
    (cached,) = (tmp_path / f"slurmdiag-{os.getuid()}").iterdir()
    before = cached.stat()
    second = _loader_run(tmp_path, payload, {})
    # THEN both runs saw every module installed under the package, the program as __main__
    expected = sorted(["slurmdiag", "slurmdiag.collector",
                       *(f"slurmdiag.collector.{name}" for name, _ in modules[:-1])])
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout == f"{expected} __main__ slurmdiag.collector\n1\n"
    # AND the first compiled and kept the code (cache miss), the second only read it (hit)
    assert cached.name.startswith(payload[0] + "-")
    after = cached.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert second.stderr == ""


def test_the_real_collector_runs_from_the_cache_and_reports_its_arguments_problems(tmp_path):
    # GIVEN the collector's bundle and arguments without "samples", then with a wrong type
    args = {**collector_args("999999999", AttachOptions(strace_s=0, timeout_s=6), "nX"), "samples": 0}
    missing = {k: v for k, v in args.items() if k != "samples"}
    for bad, message in ((missing, "argument samples missing (the controller sends every option)"),
                         ({**args, "concurrency": "8"}, "argument concurrency must be an integer, not '8'"),
                         ({**args, "pyspy": "/usr/bin/py-spy"}, "argument pyspy must be a list of paths")):
        done = _loader_run(tmp_path, collector_payload(), bad)
        # THEN a document under the node's name says which, and nothing else ran (no traceback)
        assert done.returncode == 0 and done.stderr == ""
        doc = decode_frames(done.stdout).documents["nX"]
        assert doc["errors"] == [message + ("" if "missing" in message or "'8'" in message
                                            else ", not '/usr/bin/py-spy'")]
        assert doc["processes"] == [] and doc["discovery"] is None
    # AND the arguments the controller sends work
    done = _loader_run(tmp_path, collector_payload(), args)
    doc = decode_frames(done.stdout).documents["nX"]
    assert doc["errors"] == ["no rank processes of job 999999999 found on nX"] or all(
        "scontrol" in e or "no rank processes" in e for e in doc["errors"]), doc["errors"]


def test_the_controller_sends_every_option_the_collector_requires() -> None:
    sent = collector_args("1", AttachOptions(), "n1")
    required = {name for name, _, _ in collector_options.REQUIRED}
    optional = {name for name, _, _, _ in collector_options.OPTIONAL}
    assert required <= set(sent) <= required | optional
    options = collector_options.read_options(json.loads(json.dumps(sent)))
    assert options["samples"] == 3 and options["discovery"] == "auto" and options["node"] == "n1"


@pytest.mark.parametrize(("change", "message"), [
    ({"job_id": ""}, "argument job_id must be a non-empty string, not ''"),
    ({"native": 1}, "argument native must be true or false, not 1"),
    ({"samples": True}, "argument samples must be an integer, not True"),
    ({"interval": "1"}, "argument interval must be a number, not '1'"),
    ({"exclude_pids": ["12"]}, "argument exclude_pids must be a list of process ids, not ['12']"),
    ({"discovery": "ps"}, "argument discovery must be auto, walk or listpids, not 'ps'"),
])
def test_a_wrong_typed_argument_is_named(change: dict, message: str) -> None:
    args = {**collector_args("1", AttachOptions()), **change}
    with pytest.raises(collector_options.ArgsError) as caught:
        collector_options.read_options(args)
    assert str(caught.value) == message


def test_the_loader_is_a_linted_file_sent_without_its_comments() -> None:
    source = (PACKAGE / "loader.py").read_text()
    tree = ast.parse(source)
    # THEN the -c program is the file's code without its docstring, statement for statement
    assert ast.dump(ast.Module(body=tree.body[1:], type_ignores=[])) == ast.dump(
        ast.parse(COLLECTOR_LOADER))
    assert "#" not in COLLECTOR_LOADER and len(COLLECTOR_LOADER) < 1700
    # AND old interpreters can compile it to say what they lack: no f-strings
    assert not any(isinstance(node, ast.JoinedStr) for node in ast.walk(tree))
    ruff = Path(sys.prefix) / "bin" / "ruff"
    if not ruff.exists():
        pytest.skip("ruff not installed in this venv (make venv)")
    done = subprocess.run([str(ruff), "check", "--no-cache", str(PACKAGE / "loader.py"),
                           str(PACKAGE / "bundle.py")], capture_output=True, text=True,
                          check=False, cwd=PACKAGE.parents[1])
    assert done.returncode == 0, done.stdout


OLD_PYTHONS = {version: next(iter(sorted(Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}"))), None)
               for version in ("3.8", "3.6", "2.7")}


@pytest.mark.skipif(OLD_PYTHONS["3.8"] is None, reason="no Python 3.8 here (pyenv install 3.8)")
def test_python_38_runs_the_collector_from_a_compile_then_from_the_cache(tmp_path):
    # GIVEN a node whose only interpreter is Python 3.8, the collector's floor
    args = {**collector_args("999999999", AttachOptions(strace_s=0, timeout_s=6), "nX"), "samples": 0}
    argv = [str(OLD_PYTHONS["3.8"]), "-I", "-S", "-c", COLLECTOR_LOADER, "", str(tmp_path),
            *collector_payload(), json.dumps(args)]
    for _ in range(2):  # WHEN the loader runs twice: a cache miss, then a hit
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                              env={"PATH": "/nonexistent"})
        # THEN each run sends the document, without a word on stderr
        assert done.returncode == 0 and done.stderr == ""
        doc = decode_frames(done.stdout).documents["nX"]
        assert doc["python"].startswith("3.8.") and doc["discovery"] == "proc"
    (cached,) = (tmp_path / f"slurmdiag-{os.getuid()}").iterdir()
    assert cached.name.endswith("-cpython-38-" + cached.name.rsplit("-", 1)[1])


@pytest.mark.parametrize("version", ["3.6", "2.7"])
def test_an_older_python_says_what_it_lacks(version, tmp_path):
    if OLD_PYTHONS[version] is None:
        pytest.skip(f"no Python {version} here")
    # GIVEN a node whose only interpreter is older than the floor (no fallback given)
    argv = [str(OLD_PYTHONS[version]), "-E", "-S", "-c", COLLECTOR_LOADER, "", str(tmp_path),
            *collector_payload(), "{}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": "/nonexistent"})
    # THEN the loader compiles there and says why nothing ran
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(
        f"slurmdiag: the collector needs Python 3.8+ with its json module, found {version}.")

"""The command every node runs: interpreter choice, the loader, and its compiled-code cache.

These run the real loader and collector with real interpreters (the collector finds no job and
frames a document saying so), as srun or ssh would start them on a node.
"""

from __future__ import annotations

import ast
import json
import marshal
import os
import shlex
import stat
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import pytest

from slurmdiag.options import AttachOptions
from slurmdiag.transport.collect import (
    COLLECTOR_LOADER,
    PAYLOAD_ENV,
    SYSTEM_PYTHON,
    collector_args,
    collector_bundle,
    collector_payload,
    node_command,
    without_comments,
    without_docstrings,
)
from slurmdiag.transport.framing import decode_frames
from slurmdiag.transport.ssh import ssh_command

REPO = Path(__file__).resolve().parents[2]
ARGS = {**collector_args("999999999", AttachOptions(strace_s=0, timeout_s=7)), "samples": 0,
        "node": "nodeX"}


def run(argv, **kwargs):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, **kwargs)
    return done, decode_frames(done.stdout)


def loader_argv(cache_root, python=sys.executable, has_fallback=""):
    return [python, "-I", "-S", "-c", COLLECTOR_LOADER, has_fallback, str(cache_root),
            *collector_payload(), json.dumps(ARGS)]


def cached_program(source: str) -> bytes:
    """A cache file as the loader writes one: the package, its compiled modules in order, and
    the compiled bundle.py that installs them."""
    own = (REPO / "slurmdiag" / "collector" / "bundle.py").read_text()
    return marshal.dumps(("", [("__main__", compile(source, "x", "exec"))],
                          compile(own, "bundle.py", "exec")))


def cache_files(root: Path) -> list[Path]:
    return sorted((root / f"slurmdiag-{os.getuid()}").glob("*"))


def test_payload_is_only_the_compressed_source_and_fits_in_one_argv_string():
    digest, source = collector_payload()
    # Linux caps one argv string at 128 KiB (MAX_ARG_STRLEN); the payload is far below it
    # (42 KiB once the sock_diag reader and the Flight Recorder checks were both in, 48 KiB
    # with the collector a package and the dump read by columns, 57 KiB with the sockets read
    # through descriptors and recent traffic, 66 KiB with ranks named on their command lines,
    # 59 KiB once comments were cut from what travels, 64 KiB with the poll and wait readings,
    # 47 KiB once docstrings were cut too): a guard against growth
    assert len(source) < 64 * 1024
    assert len(digest) == 20 and int(digest, 16) >= 0


def test_first_run_compiles_and_caches_privately_then_later_runs_load_the_cache(tmp_path):
    # GIVEN no cache yet
    done, frames = run(loader_argv(tmp_path))
    # THEN the collector ran and framed its document
    assert frames.documents["nodeX"]["node"] == "nodeX", done.stderr[-500:]
    # AND the compiled code is kept in a directory only the user can enter, as a 0600 file
    # named by the source hash and the exact interpreter version
    directory = tmp_path / f"slurmdiag-{os.getuid()}"
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    (cached,) = cache_files(tmp_path)
    assert stat.S_IMODE(cached.stat().st_mode) == 0o600
    assert cached.name == (f"{collector_payload()[0]}-{sys.implementation.cache_tag}-"
                           f"{sys.hexversion:x}")
    # WHEN the cached code is replaced by a program that only prints a marker
    cached.write_bytes(cached_program("print('FROM-CACHE')"))
    done, _ = run(loader_argv(tmp_path))
    # THEN the next run executes the cached code, not the source
    assert done.stdout.strip() == "FROM-CACHE"


def test_compiling_keeps_the_newest_versions_for_this_interpreter_only(tmp_path):
    # GIVEN a cache holding five older collector versions' code for this interpreter (one a
    # day apart), an unfinished temporary file of one, and code for another interpreter
    directory = tmp_path / f"slurmdiag-{os.getuid()}"
    directory.mkdir(mode=0o700)
    this_python = f"{sys.implementation.cache_tag}-{sys.hexversion:x}"
    now = time.time()
    older = [directory / f"{i:020x}-{this_python}" for i in range(5)]
    stale_tmp = directory / f"{'f' * 20}-{this_python}.4242"
    other_python = directory / f"{'0' * 20}-cpython-39-30912f0"
    for age, path in enumerate([*reversed(older), stale_tmp, other_python], start=1):
        path.write_bytes(b"stale")
        os.utime(path, (now - age * 86400, now - age * 86400))
    # WHEN this version runs there for the first time, and again
    for _ in range(2):
        done, frames = run(loader_argv(tmp_path))
        assert frames.documents["nodeX"]["node"] == "nodeX", done.stderr[-500:]
    # THEN this interpreter keeps four files, this version's and the three newest older ones (a
    # few versions used in turn do not evict each other); the rest, the unfinished temporary
    # file included, is gone; the other interpreter's file stays
    assert {p.name for p in cache_files(tmp_path)} == {
        f"{collector_payload()[0]}-{this_python}", *(p.name for p in older[-3:]),
        other_python.name}


@pytest.mark.parametrize("mode", [0o755, 0o770, 0o701])
def test_a_cache_directory_others_can_write_or_enter_is_never_used(tmp_path, mode):
    # GIVEN a planted "cache" in a directory with loose permissions
    directory = tmp_path / f"slurmdiag-{os.getuid()}"
    directory.mkdir()
    directory.chmod(mode)
    name = f"{collector_payload()[0]}-{sys.implementation.cache_tag}-{sys.hexversion:x}"
    (directory / name).write_bytes(cached_program("print('PLANTED')"))
    # WHEN the loader runs
    done, frames = run(loader_argv(tmp_path))
    # THEN the planted code is not run, the collector is, and nothing is written there
    assert "PLANTED" not in done.stdout
    assert frames.documents["nodeX"]["node"] == "nodeX"
    assert [p.name for p in directory.iterdir()] == [name]


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give the directory to another user")
def test_a_cache_directory_owned_by_another_user_is_never_used(tmp_path):
    directory = tmp_path / "slurmdiag-0"
    directory.mkdir(mode=0o700)
    os.chown(directory, 65534, 65534)
    name = f"{collector_payload()[0]}-{sys.implementation.cache_tag}-{sys.hexversion:x}"
    (directory / name).write_bytes(cached_program("print('PLANTED')"))
    done, frames = run(loader_argv(tmp_path))
    assert "PLANTED" not in done.stdout
    assert frames.documents["nodeX"]["node"] == "nodeX"


def test_a_damaged_cache_file_is_replaced_by_a_fresh_compile(tmp_path):
    run(loader_argv(tmp_path))
    (cached,) = cache_files(tmp_path)
    cached.write_bytes(b"\x00garbage")
    done, frames = run(loader_argv(tmp_path))
    assert frames.documents["nodeX"]["node"] == "nodeX", done.stderr[-500:]
    package, modules, _ = marshal.loads(cached.read_bytes())
    assert package == "slurmdiag.collector" and modules[-1][1].co_filename.endswith("__main__.py")


def test_the_source_can_come_from_the_environment_instead_of_argv(tmp_path):
    # GIVEN the node command as srun runs it: "-" for the source, the source in the environment
    digest, source = collector_payload()
    argv = [sys.executable, "-I", "-S", "-c", COLLECTOR_LOADER, "", str(tmp_path), digest, "-",
            json.dumps(ARGS)]
    env = {"PATH": os.environ["PATH"], PAYLOAD_ENV: source}
    # THEN a node without the cache compiles it from there, and caches it
    done, frames = run(argv, env=env)
    assert frames.documents["nodeX"]["node"] == "nodeX", done.stderr[-500:]
    assert len(cache_files(tmp_path)) == 1
    # AND without the cache nor the variable, it says so in one line
    argv[6] = ""
    done, frames = run(argv, env={"PATH": os.environ["PATH"]})
    assert not frames.documents
    assert done.stderr.strip() == "slurmdiag: the collector source is not in the environment"


def test_an_empty_cache_argument_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done, frames = run(loader_argv(""))
    assert frames.documents["nodeX"]["node"] == "nodeX", done.stderr[-500:]
    assert list(tmp_path.iterdir()) == []


# An old Python, faked: the real interpreter runs the loader with sys.version_info set to 3.6,
# so /proc/self/cmdline is what a real 3.6 would show. A "new" interpreter drops that prefix.
FAKE_END = "#fake-python-3.6-end"
FAKE_36 = "import sys;sys.version_info=(3,6,8);sys.version='3.6.8 (fake)'\n" + FAKE_END + "\n"
# python3-minimal: no json package, no _json accelerator
FAKE_MINIMAL = "import sys;sys.modules['_json']=None;sys.modules['json']=None\n" + FAKE_END + "\n"


def fake_python(path: Path, old: bool, prefix: str = FAKE_36) -> str:
    body = (f'l=$4; shift 4; exec {shlex.quote(sys.executable)} -I -S -c "{prefix}$l" "$@"'
            if old else
            f'l=$4; shift 4; exec {shlex.quote(sys.executable)} -I -S -c "${{l#*{FAKE_END}}}" "$@"')
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def node_script(options: AttachOptions, system_python: str, controller_python: str) -> list[str]:
    """The node command with other paths for the system and the controller's interpreters."""
    argv = node_command("999999999", options, "nodeX")
    argv[2] = argv[2].replace(SYSTEM_PYTHON, system_python)
    argv[4] = controller_python
    return argv


def this_python() -> str:
    return "{}.{}.{}".format(*sys.version_info[:3])


def test_node_command_prefers_the_system_python(tmp_path):
    argv = node_command("999999999", AttachOptions(node_cache=str(tmp_path)), "nodeX")
    assert argv[:2] == ["/bin/sh", "-c"] and SYSTEM_PYTHON in argv[2]
    if os.access(SYSTEM_PYTHON, os.X_OK):
        done, frames = run(argv)
        version = subprocess.run([SYSTEM_PYTHON, "-c", "import platform;print(platform.python_version())"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        assert frames.documents["nodeX"]["python"] == version, done.stderr[-500:]


def test_the_direct_form_runs_the_system_python_with_no_shell(tmp_path):
    argv = node_command("999999999", AttachOptions(node_cache=str(tmp_path)), "nodeX", portable=False)
    # the system Python itself, the controller's interpreter as the loader's fallback
    assert argv[:5] == [SYSTEM_PYTHON, "-I", "-S", "-c", COLLECTOR_LOADER]
    assert argv[5] == os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    if os.access(SYSTEM_PYTHON, os.X_OK):
        done, frames = run(argv)
        assert frames.documents["nodeX"]["node"] == "nodeX", done.stderr[-500:]


def test_an_old_python_whose_fallback_is_missing_tries_python3_on_path(tmp_path):
    # GIVEN a 3.6 system Python run directly, a controller interpreter the node does not have,
    # and a newer python3 on the node's PATH
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake_python(bin_dir / "python3", old=False)
    argv = loader_argv(tmp_path, python=fake_python(tmp_path / "python3.6", old=True),
                       has_fallback=str(tmp_path / "no-such-python"))
    done, frames = run(argv, env={"PATH": str(bin_dir)})
    # THEN the PATH's python3 collects
    assert frames.documents["nodeX"]["python"] == this_python(), done.stderr[-500:]


def test_an_old_system_python_hands_over_to_the_controllers_interpreter(tmp_path):
    # GIVEN a node whose system Python is 3.6 (RHEL 8), and the controller's interpreter
    argv = node_script(AttachOptions(node_cache=str(tmp_path)),
                       fake_python(tmp_path / "python3.6", old=True),
                       fake_python(tmp_path / "python3.11", old=False))
    # THEN the loader re-runs itself with the controller's interpreter, which collects
    done, frames = run(argv)
    assert frames.documents["nodeX"]["python"] == this_python(), done.stderr[-500:]
    assert done.stderr == ""


def test_a_system_python_without_json_hands_over_too(tmp_path):
    argv = node_script(AttachOptions(node_cache=str(tmp_path)),
                       fake_python(tmp_path / "python3-minimal", old=True, prefix=FAKE_MINIMAL),
                       fake_python(tmp_path / "python3.11", old=False))
    done, frames = run(argv)
    assert frames.documents["nodeX"]["python"] == this_python(), done.stderr[-500:]
    assert done.stderr == ""


def test_a_missing_system_python_falls_back_too(tmp_path):
    argv = node_script(AttachOptions(node_cache=str(tmp_path)), str(tmp_path / "no-such-python"),
                       sys.executable)
    done, frames = run(argv)
    assert frames.documents["nodeX"]["python"] == this_python(), done.stderr[-500:]


def test_an_old_python_with_nothing_to_hand_over_to_says_why_nothing_ran(tmp_path):
    old = fake_python(tmp_path / "python3.6", old=True)
    for argv in (node_command("999999999", AttachOptions(node_python=old), "nodeX"),
                 node_script(AttachOptions(), old, fake_python(tmp_path / "py2", old=True))):
        done, frames = run(argv)
        assert not frames.documents
        assert "slurmdiag: the collector needs Python 3.8+ with its json module, found 3.6.8" in done.stderr


def test_ssh_runs_the_same_node_command_through_the_login_shell(tmp_path):
    options = AttachOptions(node_cache=str(tmp_path))
    line = ssh_command(options, "999999999", "nodeX")
    assert shlex.split(line) == node_command("999999999", options, "nodeX")
    done, frames = run(["/bin/sh", "-c", line])
    assert frames.documents["nodeX"]["node"] == "nodeX", done.stderr[-500:]


def test_comment_lines_are_cut_from_what_travels_and_every_line_keeps_its_number():
    source = "import os  # the OS\n    # an indented comment line\nURL = 'http://x/#frag'\n"
    assert without_comments(source) == "import os  # the OS\n\nURL = 'http://x/#frag'\n"
    # AND every node program's syntax tree is what its file's is (no string holds a line that
    # looks like a comment), line for line
    others = [("slurmdiag.probe", "node.py"), ("slurmdiag.collector", "doctor_node.py")]
    programs = [*collector_bundle()[1],
                *((f"{package}/{file}", resources.files(package).joinpath(file).read_text())
                  for package, file in others)]
    for name, text in programs:
        shipped = without_comments(text)
        assert shipped.count("\n") == text.count("\n"), name
        assert ast.dump(ast.parse(shipped)) == ast.dump(ast.parse(text)), name
        # AND with the docstrings cut too, the same tree but for the docstrings, made empty
        shipped = without_docstrings(shipped)
        assert shipped.count("\n") == text.count("\n"), name
        assert _with_empty_docstrings(ast.parse(shipped)) == _with_empty_docstrings(
            ast.parse(text)), name


def _with_empty_docstrings(tree: ast.AST) -> str:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                first.value.value = ""
    return ast.dump(tree)


def test_docstrings_are_cut_from_what_travels_and_other_strings_are_kept():
    source = ('"""Module."""\nimport os\n\n\ndef f(x):\n    """Does f.\n\n    More.\n    """\n'
              '    return """kept\n"""\n\n\nclass C:\n    """C."""\n    y = {"k": "v"}\n')
    shipped = without_docstrings(source)
    assert shipped == ('""\nimport os\n\n\ndef f(x):\n    ""\n\n\n\n'
                       '    return """kept\n"""\n\n\nclass C:\n    ""\n    y = {"k": "v"}\n')
    function = ast.parse(shipped).body[2]
    assert isinstance(function, ast.FunctionDef)
    assert ast.literal_eval(function.body[-1].value) == "kept\n"  # type: ignore[attr-defined]

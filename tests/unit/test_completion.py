"""Shell completion generated from the parser, installed by the README's commands, in real shells."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
BASH_COMPLETION = Path("/usr/share/bash-completion/bash_completion")


def readme_commands(shell: str) -> list[str]:
    """The README's install lines for ``shell`` (the mkdir before each, and the redirect)."""
    text = (REPO / "README.md").read_text()
    block = text.split("## Install, completion, help", 1)[1].split("```")[1]
    lines = [ln for ln in block.strip().splitlines()]
    index = next(i for i, ln in enumerate(lines) if f"slurmdiag completion {shell}" in ln)
    return lines[max(0, index - 1): index + 1] if shell == "bash" else [lines[index]]


def install(tmp_path: Path, shell: str) -> Path:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, HOME=str(home), PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    for line in readme_commands(shell):
        subprocess.run(["bash", "-c", line], env=env, check=True, timeout=60)
    return home


def bash_complete(home: Path, words: list[str]) -> list[str]:
    """Complete ``words`` (the last one being typed) as bash does, loading the installed file."""
    script = (
        f"source {BASH_COMPLETION}; __load_completion slurmdiag || exit 3; "
        f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}; "
        '_slurmdiag; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    env = dict(os.environ, HOME=str(home))
    env.pop("XDG_DATA_HOME", None)
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout.split()


@pytest.mark.skipif(not BASH_COMPLETION.exists(), reason="bash-completion is not installed")
def test_bash_completion_installed_by_the_readme_command(tmp_path):
    home = install(tmp_path, "bash")
    assert (home / ".local/share/bash-completion/completions/slurmdiag").is_file()
    assert bash_complete(home, ["slurmdiag", "at"]) == ["attach"]
    assert bash_complete(home, ["slurmdiag", "attach", "12", "--tr"]) == ["--transport"]
    assert bash_complete(home, ["slurmdiag", "attach", "12", "--transport", ""]) == ["srun", "ssh"]
    assert {"check", "show"} <= set(bash_complete(home, ["slurmdiag", "config", ""]))
    assert bash_complete(home, ["slurmdiag", "watch", "--test"]) == ["--test-notify"]
    assert "doctor" in bash_complete(home, ["slurmdiag", ""])
    # A new option completes without touching the generator: it comes from the parser.
    assert "--check-heartbeat" in bash_complete(home, ["slurmdiag", "watch", "--"])


ZPTY_DRIVER = r"""
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z "fpath=($1 \$fpath); autoload -Uz compinit; compinit -u -D; PS1='READY> '; unsetopt beep; print COMPINIT_DONE"
out=""
for i in {1..100}; do zpty -r -t z chunk && out+=$chunk; [[ $out == *COMPINIT_DONE*READY\>* ]] && break; sleep 0.1; done
zpty -w -n z "slurmdiag $2"$'\t'
out=""
# until the completed word is redrawn, or 10 s on a loaded machine (was a fixed 3 s: failed once under load)
for i in {1..100}; do sleep 0.1; while zpty -r -t z chunk; do out+=$chunk; done; [[ ${out//$'\b'/} == *"$3"* ]] && break; done
print -r -- "$out"
zpty -d z
"""


@pytest.mark.skipif(not shutil.which("zsh"), reason="zsh is not installed")
@pytest.mark.parametrize("typed, completed", [
    ("con", "slurmdiag config "),
    ("watch --test", "slurmdiag watch --test-notify "),
    ("doctor --py", "slurmdiag doctor --py-spy "),
])
def test_zsh_completion_installed_by_the_readme_command(tmp_path, typed, completed):
    # GIVEN the README's zsh line run in a fresh HOME, and a real interactive zsh (zpty)
    home = install(tmp_path, "zsh")
    driver = tmp_path / "driver.zsh"
    driver.write_text(ZPTY_DRIVER)
    done = subprocess.run(["zsh", "-f", str(driver), str(home / ".zfunc"), typed,
                           completed.split()[-1]],
                          capture_output=True, text=True, timeout=60, check=False)
    # THEN a TAB completes the word in the command line zsh redraws
    screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|.\x08", "", done.stdout)
    assert completed in screen, screen[-300:]

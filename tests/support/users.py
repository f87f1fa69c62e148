"""A real second user for tests where file ownership matters (the runner is root)."""

from __future__ import annotations

import os
import pwd
import subprocess
from dataclasses import dataclass

import pytest

OTHER_USER = "sdhostile"


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int


def other_user() -> User:
    """The test user ``sdhostile`` (created with useradd when missing); skips unless root."""
    if os.geteuid() != 0:
        pytest.skip("ownership tests need root to create and act as a second user")
    try:
        entry = pwd.getpwnam(OTHER_USER)
    except KeyError:
        done = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin",
                               OTHER_USER], capture_output=True, text=True, check=False)
        if done.returncode not in (0, 9):  # 9: created meanwhile by another test session
            pytest.fail(f"useradd {OTHER_USER} failed: {done.stderr.strip()}")
        entry = pwd.getpwnam(OTHER_USER)
    return User(entry.pw_name, entry.pw_uid, entry.pw_gid)

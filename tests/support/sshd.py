"""A real OpenSSH server on loopback for the ssh transport tests (Debian's openssh-server)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


@dataclass
class Sshd:
    port: int
    host_public_key: str  # "ssh-ed25519 AAAA..."
    user_key: Path
    process: subprocess.Popen

    def known_hosts_line(self) -> str:
        return f"[127.0.0.1]:{self.port} {self.host_public_key}\n"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_sshd(directory: Path, extra_env: dict[str, str]) -> Sshd:
    """Start sshd on a free loopback port that accepts one generated key for the current user."""
    if not os.path.exists(SSHD) or shutil.which("ssh-keygen") is None:
        raise RuntimeError("openssh-server is not installed (apt-get install openssh-server)")
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(directory / name)],
                       check=True)
    (directory / "authorized_keys").write_text((directory / "user_key.pub").read_text())
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
    port = _free_port()
    set_env = " ".join(f"{k}={v}" for k, v in extra_env.items())
    config = directory / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {directory / 'host_key'}\n"
        f"PidFile {directory / 'sshd.pid'}\nAuthorizedKeysFile {directory / 'authorized_keys'}\n"
        "StrictModes no\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\n"
        # A real node has Slurm configured; here the emulated nodes need SLURM_CONF from sshd.
        + (f"SetEnv {set_env}\n" if set_env else "")
    )
    with open(directory / "sshd.log", "w") as log:  # the child keeps its own copy of the fd
        process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)],
                                   stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if process.poll() is not None:
                raise RuntimeError(f"sshd exited: {(directory / 'sshd.log').read_text()[-500:]}")
            time.sleep(0.1)
    else:
        process.kill()
        raise RuntimeError("sshd did not start listening within 10 s")
    host_pub = " ".join((directory / "host_key.pub").read_text().split()[:2])
    return Sshd(port=port, host_public_key=host_pub, user_key=directory / "user_key", process=process)

"""The ssh transport: the same collector over a paramiko exec channel, nodes in parallel.

Used when Slurm will not add a step to the job (old Slurm without --overlap, a site policy, a
step stuck behind "Requested nodes are busy"). Host keys are checked against known_hosts; an
unknown host is refused unless the user asked to accept new keys (``SshSettings.accept_new``).
Ctrl-C asks each running collector's channel for SIGUSR1 (the SSH "signal" request, RFC 4254
6.9), waits a short grace period and marks the result interrupted. OpenSSH refuses that request
for root logins ("session signalling requires privilege separation"), and a kill through a second
channel was tried and did not deliver partial documents reliably here: over ssh, collectors may
run on to their own deadline after Ctrl-C (docs/reliability.md).
"""

from __future__ import annotations

import os
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

from slurmdiag.errors import MissingExtra, ParseError
from slurmdiag.options import AttachOptions, SshSettings
from slurmdiag.slurm.parse import parse_scontrol_node_addrs
from slurmdiag.transport.base import FanoutResult, NodeOutcome, Progress
from slurmdiag.transport.collect import node_command
from slurmdiag.transport.framing import DocumentSink, decode_frames
from slurmdiag.transport.run import CommandResult, run_command

MAX_PARALLEL = 64
# After Ctrl-C: how long the collectors get to send what they have (as srun's interrupt_grace_s).
INTERRUPT_GRACE_S = 3.0


def _paramiko() -> Any:
    try:
        import paramiko
    except ImportError:
        raise MissingExtra("ssh", "paramiko") from None
    return paramiko


def node_addresses(
    nodes: Sequence[str], runner: Callable[..., CommandResult] = run_command
) -> dict[str, str]:
    """NodeAddr of each node as Slurm knows it (falls back to the node name)."""
    result = runner(["scontrol", "show", "node", "-o", ",".join(nodes)], 20.0)
    try:
        addrs = parse_scontrol_node_addrs(result.stdout) if result.ok else {}
    except ParseError:
        addrs = {}  # ssh to the node names themselves, as a user would

    return {name: addrs.get(name) or name for name in nodes}


def ssh_command(options: AttachOptions, job_id: str, node: str) -> str:
    """The remote command line: the same node command as srun's, quoted for the login shell."""
    return shlex.join(node_command(job_id, options, node))




def send_signal(channel: Any, name: str) -> None:
    """Ask the server to signal the channel's command (RFC 4254 6.9; paramiko has no call)."""
    paramiko = _paramiko()
    message = paramiko.Message()
    message.add_byte(paramiko.common.cMSG_CHANNEL_REQUEST)
    message.add_int(channel.remote_chanid)
    message.add_string("signal")
    message.add_boolean(False)
    message.add_string(name)
    channel.transport._send_user_message(message)


def _run_on_node(
    client_factory: Callable[[], Any],
    host: str,
    node: str,
    command: str,
    connect_kwargs: dict[str, Any],
    deadline: float,
    after_connect: Callable[[Any], None] | None = None,
    interrupt: threading.Event | None = None,
) -> NodeOutcome:
    paramiko = _paramiko()
    interrupt = interrupt or threading.Event()
    client = client_factory()
    try:
        remaining = deadline - time.monotonic()
        try:
            client.connect(host, timeout=max(1.0, min(10.0, remaining)), **connect_kwargs)
        except paramiko.BadHostKeyException as exc:
            return NodeOutcome(
                node, "unreachable", None,
                f"ssh to {host}: host key CHANGED ({exc}); refusing to connect",
            )
        except paramiko.SSHException as exc:
            message = f"ssh to {host}: {exc}"
            if "known_hosts" in str(exc):
                message += " (hint: add its key to known_hosts, or pass --ssh-accept-new)"
            return NodeOutcome(node, "unreachable", None, message)
        except OSError as exc:
            return NodeOutcome(node, "unreachable", None, f"ssh to {host}: {exc}")
        if after_connect is not None:
            after_connect(client)
        if interrupt.is_set():
            return NodeOutcome(node, "error", None, "interrupted before the collector started")
        transport = client.get_transport()
        channel = transport.open_session()
        channel.settimeout(0.5)
        channel.exec_command(command)
        channel.shutdown_write()
        out = bytearray()
        err = bytearray()
        signalled = False
        while time.monotonic() < deadline:
            if interrupt.is_set() and not signalled:
                # The collector sends what it has on SIGUSR1, as srun forwards it.
                signalled = True
                deadline = min(deadline, time.monotonic() + INTERRUPT_GRACE_S)
                try:
                    send_signal(channel, "USR1")
                except (OSError, paramiko.SSHException):
                    break
            if channel.recv_ready():
                out.extend(channel.recv(65536))
            elif channel.recv_stderr_ready():
                err.extend(channel.recv_stderr(65536))
            elif channel.exit_status_ready():
                break
            else:
                time.sleep(0.02)
        while channel.recv_ready():
            out.extend(channel.recv(65536))
        while channel.recv_stderr_ready():
            err.extend(channel.recv_stderr(65536))
        timed_out = not channel.exit_status_ready()
        frames = decode_frames(out.decode(errors="replace"))
        if node in frames.documents:
            return NodeOutcome(node, "ok", frames.documents[node])
        if node in frames.damaged:
            return NodeOutcome(node, "error", None, f"output damaged: {frames.damaged[node]}")
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        if signalled:
            return NodeOutcome(node, "error", None, "interrupted: the collector sent nothing")
        if timed_out:
            return NodeOutcome(node, "timeout", None, "collector did not finish before the deadline")
        status = channel.recv_exit_status()
        return NodeOutcome(
            node, "error", None, f"collector exited {status} without a result: {tail[0][:300]}"
        )
    finally:
        client.close()


class SshTransport:
    """The collector over ssh (paramiko), nodes in parallel (see base.Transport for the contract).

    ``settings``: the login (user, port, key, known_hosts, accept_new). ``addresses``: node name
    to host, else each node's NodeAddr from ``scontrol show node`` run by ``runner``.
    """

    name = "ssh"

    def __init__(
        self,
        settings: SshSettings | None = None,
        *,
        addresses: dict[str, str] | None = None,
        runner: Callable[..., CommandResult] = run_command,
    ) -> None:
        self.settings = settings or SshSettings()
        self.addresses = addresses
        self.runner = runner

    def collect(
        self,
        job_id: str,
        nodes: Sequence[str],
        options: AttachOptions,
        *,
        het_group: tuple[str, int] | None = None,  # a component's nodes are reached directly
        progress: Progress | None = None,
        on_started: Callable[[], None] | None = None,
        on_document: DocumentSink | None = None,
    ) -> FanoutResult:
        """Run the collector on every node over ssh, in parallel, within ``options.timeout_s``."""
        paramiko = _paramiko()
        settings = self.settings
        start = time.monotonic()
        deadline = start + options.timeout_s
        hosts = self.addresses if self.addresses is not None else node_addresses(nodes, self.runner)
        known_hosts_path = settings.known_hosts or os.path.expanduser("~/.ssh/known_hosts")

        def client_factory() -> Any:
            client = paramiko.SSHClient()
            if os.path.exists(known_hosts_path):
                client.load_host_keys(known_hosts_path)
            if settings.accept_new:
                client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
            else:
                client.set_missing_host_key_policy(paramiko.RejectPolicy())
            return client

        connect_kwargs: dict[str, Any] = {
            "port": settings.port,
            "username": settings.user,
            "key_filename": settings.key_filename,
            "allow_agent": settings.key_filename is None,
            "look_for_keys": settings.key_filename is None,
            "banner_timeout": 10,
            "auth_timeout": 10,
        }
        result = FanoutResult(transport=self.name)
        done = 0
        lock = threading.Lock()
        interrupt = threading.Event()

        def remember_keys(client: Any) -> None:
            # accept_new: trust on first use and remember the key, like ssh's accept-new.
            # Re-read the file under the lock so parallel nodes do not drop each other's keys.
            key = client.get_transport().get_remote_server_key()
            host, host_port = client.get_transport().getpeername()[:2]
            name = host if host_port == 22 else f"[{host}]:{host_port}"
            with lock:
                os.makedirs(os.path.dirname(known_hosts_path) or ".", exist_ok=True)
                stored = paramiko.HostKeys()
                if os.path.exists(known_hosts_path):
                    stored.load(known_hosts_path)
                if stored.lookup(name) is None:
                    stored.add(name, key.get_name(), key)
                    stored.save(known_hosts_path)

        def one(node: str) -> NodeOutcome:
            nonlocal done
            try:
                outcome = _run_on_node(
                    client_factory, hosts[node], node, ssh_command(options, job_id, node),
                    connect_kwargs, deadline, remember_keys if settings.accept_new else None,
                    interrupt,
                )
            except Exception as exc:  # noqa: BLE001 - one node's failure is data, not a crash
                outcome = NodeOutcome(node, "error", None, f"ssh: {type(exc).__name__}: {exc}")
            with lock:
                done += 1
                if progress is not None:
                    progress(done, len(nodes))
            if on_document is not None and outcome.status == "ok" and outcome.document is not None:
                on_document(node, outcome.document)
            return outcome

        pool = ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, max(1, len(nodes))))
        futures = {node: pool.submit(one, node) for node in nodes}
        if on_started is not None:
            on_started()
        try:
            wait(futures.values(), timeout=max(0.1, deadline + 2 - time.monotonic()))
        except KeyboardInterrupt:
            # Ctrl-C (or SIGTERM through the CLI): the collectors get SIGUSR1 and a grace period.
            interrupt.set()
            result.interrupted = True
            result.warnings.append("interrupted: the snapshot holds what the nodes sent until then")
            try:
                wait(futures.values(), timeout=INTERRUPT_GRACE_S + 2)
            except KeyboardInterrupt:
                pass  # a second Ctrl-C: keep what is there now
        for node, future in futures.items():
            if future.done() and future.exception() is None:
                result.nodes[node] = future.result()
            elif interrupt.is_set():
                result.nodes[node] = NodeOutcome(node, "error", None,
                                                 "interrupted before the collector answered")
            else:  # a thread stuck past the deadline
                result.nodes[node] = NodeOutcome(node, "timeout", None,
                                                 "no answer before the deadline")
        interrupt.set()  # threads still running stop their collectors and close their channels
        pool.shutdown(wait=False, cancel_futures=True)
        result.duration_s = time.monotonic() - start
        return result

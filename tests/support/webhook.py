"""A real webhook receiver on loopback (http.server), for the notification and watchdog tests."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self

SECRET_PATH = "/hooks/T0SECRET/B0SECRET/xoxSECRETTOKEN42"




class WebhookServer:
    """http.server on 127.0.0.1 with a random port; records every POST and answers as scripted.

    ``statuses`` is consumed one per request (then 200); ``delay_s`` holds each answer back.
    An entry may be ``(status, {header: value})`` to answer with headers (``Retry-After``).
    """

    def __init__(
        self, statuses: list[Any] | None = None, delay_s: float = 0.0, port: int = 0
    ) -> None:
        self.statuses = list(statuses or [])
        self.delay_s = delay_s
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with server._lock:
                    answer = server.statuses.pop(0) if server.statuses else 200
                    status, headers = answer if isinstance(answer, tuple) else (answer, {})
                    server.requests.append(
                        {
                            "path": self.path,
                            "status": status,
                            "content_type": self.headers.get("Content-Type"),
                            "body": json.loads(body) if body else None,
                            "time": time.monotonic(),
                        }
                    )
                if server.delay_s:
                    time.sleep(server.delay_s)
                # Echo the path back on errors, as some servers do: it must not reach our logs.
                reply = b"ok" if status < 400 else f"bad request to {self.path}".encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._httpd = _QuietServer(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{SECRET_PATH}"

    @property
    def delivered(self) -> list[dict[str, Any]]:
        """Bodies of the posts answered with 2xx."""
        return [r["body"] for r in self.requests if 200 <= r["status"] < 300]

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (timeout tests) is expected here


def closed_port_url() -> str:
    """A loopback URL nobody listens on (the port was just released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}{SECRET_PATH}"



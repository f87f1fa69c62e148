"""Scenario: rank 0 serves its weights once and shuts its server down from the handler.

Every 3 steps rank 0 hands its weights to an evaluator over HTTP: it starts an
`http.server.HTTPServer`, lets the evaluator (a thread standing in for it) fetch them, and calls
`serve_forever()`; the request handler, once the weights are sent, calls
`self.server.shutdown()` to end the serving. With a single-threaded server that is Python's
classic self-deadlock: `shutdown()` waits for `serve_forever()` to return, which waits for the
handler that called it. Rank 0's main thread sits in the handler, inside `serve_forever()`;
ranks 1-3 wait in the next step's broadcast of rank 0's weights. A server's accept loop with
the peers waiting for its broadcast: the sight of a served model idle between requests
(`healthy_generation_server`), but rank 0 is stuck in its own handler. Culprit: rank 0.
"""

from __future__ import annotations

import http.server
import io
import threading
import urllib.request

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

HAND_OVER_EVERY = 3
STEPS = 1000
CLIENT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def hand_over(weights: bytes) -> None:
    """Serve ``weights`` to one evaluator, then stop serving."""

    class Weights(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(weights)))
            self.end_headers()
            self.wfile.write(weights)
            self.server.shutdown()  # CULPRIT

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Weights)
    url = "http://{}:{}/weights".format(*server.server_address)
    threading.Thread(target=evaluate, args=(url,), name="evaluator", daemon=True).start()
    server.serve_forever()
    server.server_close()


def evaluate(url: str) -> None:
    """The evaluator: fetch the weights (it would score them)."""
    with CLIENT.open(url) as response:
        response.read()


def sync_weights(model: torch.nn.Module) -> None:
    """Every rank starts the step from rank 0's weights."""
    for parameter in model.parameters():
        dist.broadcast(parameter.data, src=0)  # WAITING


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    for step in range(STEPS):
        if step == HAND_OVER_EVERY + 1 and info.rank:
            harness.report_ready(info, f"step {step}: weights broadcast", role="waiting")
        sync_weights(model)
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f}")
        if info.rank == 0 and step % HAND_OVER_EVERY == 0 and step:
            if step == HAND_OVER_EVERY:
                harness.report_ready(info, f"step {step}: hand-over", role="culprit")
            buffer = io.BytesIO()
            torch.save(model.state_dict(), buffer)
            hand_over(buffer.getvalue())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

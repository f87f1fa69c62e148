"""Scenario: rank 0 starts its status server "in a thread" by calling serve_forever itself.

After the first epoch rank 0 starts a small HTTP status page for the dashboard, meant to run on
a thread of its own, with the classic slip of calling the target instead of passing it:

    threading.Thread(target=server.serve_forever(), daemon=True).start()

serve_forever() runs at once, on the main thread, and never returns: rank 0 sits in
socketserver's accept loop (a select with a 0.5 s timeout), no frame of the job's code inside
it. Ranks 1-3 go on to the next epoch and wait in the broadcast of its shuffle seed from
rank 0. The stacks are those of healthy_generation_server between requests (a server rank in
its accept loop, the others in a broadcast from it): the liar of the rule that calls that a
service waiting for its clients.
"""

from __future__ import annotations

import http.server
import threading

import _harness as harness
import _training as training
import torch
import torch.distributed as dist

EPOCHS = 100
STEPS_PER_EPOCH = 5


class StatusPage(http.server.BaseHTTPRequestHandler):
    epoch = 0

    def do_GET(self) -> None:
        body = f'{{"epoch": {StatusPage.epoch}}}'.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def start_status_server() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StatusPage)
    threading.Thread(target=server.serve_forever(), daemon=True).start()  # CULPRIT


def epoch_seed(epoch: int) -> int:
    """Rank 0 draws the epoch's shuffle seed; every rank gets it."""
    seed = torch.randint(0, 1 << 30, (1,)) if dist.get_rank() == 0 else torch.zeros(1).long()
    dist.broadcast(seed, src=0)  # WAITING
    return int(seed.item()) + epoch


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    for epoch in range(EPOCHS):
        if epoch == 1 and info.rank != 0:
            harness.report_ready(info, f"epoch {epoch}: the seed's broadcast", role="waiting")
        seed = epoch_seed(epoch)
        for step in range(STEPS_PER_EPOCH):
            loss = training.train_step(model, training.synthetic_batch(info.rank, seed + step))
        harness.log(info, f"epoch {epoch} loss {loss:.4f}")
        StatusPage.epoch = epoch
        if epoch == 0 and info.rank == 0:
            harness.report_ready(info, f"epoch {epoch}: start the status server", role="culprit")
            start_status_server()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

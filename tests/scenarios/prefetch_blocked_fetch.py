"""Scenario: the main thread waits for a prefetch thread that is blocked in a socket read.

Every rank streams its training shards from a shard server through a one-thread
ThreadPoolExecutor: while step N trains, the next shard's manifest is fetched (urllib, no
timeout). Each rank's shard server runs in its own process's thread (a stand-in for the
storage gateway on the node). From step 3 rank 2's server takes the request and never
answers (its handler waits on an event nobody sets), so rank 2's prefetch thread sits in the
socket read, and its main thread waits in `Future.result()` for that manifest, both idle.
Ranks 0, 1, 3 wait in the next gradient all_reduce.

The rank's main thread is not where it is stuck: a verdict that names only the main thread's
line says "waiting for a future", not what for.
"""

from __future__ import annotations

import http.server
import json
import threading
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor

import _harness as harness
import _training as training
import torch.distributed as dist

STALL_RANK = 2
STALL_FROM_STEP = 3
STEPS = 1000
#: urlopen without a timeout; no proxy, so the request goes where the URL says.
CLIENT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ShardServer(http.server.ThreadingHTTPServer):
    """Serves shard manifests; ``stalled`` makes it take requests and never answer them."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), ManifestHandler)
        self.stalled = False
        self.resume = threading.Event()  # nobody sets it


class ManifestHandler(http.server.BaseHTTPRequestHandler):
    server: ShardServer

    def do_GET(self) -> None:
        if self.server.stalled:
            self.server.resume.wait()
        body = json.dumps({"shard": self.path.rsplit("/", 1)[-1], "files": 64}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def fetch_manifest(base_url: str, shard: int) -> dict[str, object]:
    with CLIENT.open(f"{base_url}/manifest/{shard}") as response:
        return json.loads(response.read())


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    server = ShardServer()
    threading.Thread(target=server.serve_forever, name="shard-server", daemon=True).start()
    base_url = "http://{}:{}".format(*server.server_address)
    prefetcher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prefetch")
    pending: Future[dict[str, object]] = prefetcher.submit(fetch_manifest, base_url, 0)
    model = training.build_model()
    for step in range(STEPS):
        stalls = info.rank == STALL_RANK
        if step == STALL_FROM_STEP:
            harness.report_ready(info, f"step {step}: " + (
                "Future.result() of the manifest" if stalls else "gradient all_reduce"),
                role="culprit" if stalls else "waiting")
        manifest = pending.result()  # CULPRIT
        if stalls and step == STALL_FROM_STEP - 1:
            server.stalled = True  # the manifest for the next step is the first unanswered
        pending = prefetcher.submit(fetch_manifest, base_url, step + 1)
        loss = training.train_step(model, training.synthetic_batch(info.rank, step))
        harness.log(info, f"step {step} loss {loss:.4f} shard {manifest['shard']}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

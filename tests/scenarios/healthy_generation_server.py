"""Scenario (control): a model served for text generation, idle between requests.

Megatron-LM's text generation server, small: every rank holds a shard of the model; rank 0
serves HTTP (`ThreadingHTTPServer.serve_forever()` on its main thread, one handler thread a
request) and, for each request, broadcasts the command to the other ranks, then every rank
runs the decoding steps together (the logits all_reduced across the shards). Ranks 1-3 loop on
that broadcast, waiting for rank 0's next command. A client sends a prompt every 45 s: most of
the time the server is idle, rank 0 in its accept loop and ranks 1-3 in the broadcast, and no
log line is written. It must never get a hang verdict: a service waiting for its clients.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
import urllib.request

import _harness as harness
import torch
import torch.distributed as dist
from asyncio_fetch_stuck import unresponsive_service

WIDTH, VOCAB = 256, 512
GENERATE, TOKENS = 1, 16
#: Seconds between two requests of the client.
REQUEST_EVERY_S = 45.0
CLIENT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ShardedModel:
    """One rank's shard of the vocabulary projection (tensor parallel over the ranks)."""

    def __init__(self, rank: int) -> None:
        generator = torch.Generator().manual_seed(rank)
        self.embed = torch.randn(VOCAB, WIDTH, generator=torch.Generator().manual_seed(0))
        self.project = torch.randn(WIDTH, VOCAB, generator=generator) / WIDTH**0.5
        self.cache_lock = threading.Lock()  # guards the shard's cache of prompt states
        self.requests = 0
        self.stuck = False
        self.info: harness.RankInfo | None = None

    def generate(self, prompt: list[int], tokens: int) -> list[int]:
        self.requests += 1
        if self.info is not None and self.requests == 2:
            role = "culprit" if self.stuck else "waiting"
            harness.report_ready(self.info, "request 2: " + (
                "the cache lock" if self.stuck else "the logits all_reduce"), role=role)
        if self.stuck and self.requests == 2:
            # the first request's early return left the lock held (no finally)
            self.cache_lock.acquire()  # CULPRIT
        if self.stuck and self.requests == 1:
            self.cache_lock.acquire()
        out = list(prompt)
        for _ in range(tokens):
            hidden = self.embed[out[-1]]
            logits = hidden @ self.project
            dist.all_reduce(logits)  # WAITING
            out.append(int(logits.argmax()))  # the shards' partial logits, summed
        return out


def broadcast_command(command: int, prompt_token: int, tokens: int) -> tuple[int, int, int]:
    message = torch.tensor([command, prompt_token, tokens], dtype=torch.int64)
    dist.broadcast(message, src=0)  # WAITING
    return int(message[0]), int(message[1]), int(message[2])


def serve(model: ShardedModel, info: harness.RankInfo, request_every_s: float,
          moderation: str | None = None) -> None:
    """Rank 0: the HTTP front end; each request drives every rank through one generation.
    ``moderation``: the URL of a moderation service each prompt is checked with first, from the
    second request on (generation_server_request_stuck)."""
    lock = threading.Lock()

    class Generate(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if moderation is not None and model.requests >= 1:
                harness.report_ready(info, "request 2: the moderation service", role="culprit")
                check_prompt(moderation, request["prompt"])
            with lock:
                broadcast_command(GENERATE, request["prompt"], request["tokens"])
                text = model.generate([request["prompt"]], request["tokens"])
            harness.log(info, f"served a request of {request['tokens']} tokens")
            body = json.dumps({"tokens": text}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Generate)
    url = "http://{}:{}/generate".format(*server.server_address)
    # the hung twin's rank 0 is ready at its second request only (do_POST): a "healthy"
    # report after the first let the look start in the 2 s before it (seen in session 31's
    # full run: a service idle between requests, the stuck request not yet made)
    threading.Thread(target=client, args=(url, info, request_every_s, moderation is None),
                     name="client", daemon=True).start()
    start_server(server)


def check_prompt(url: str, prompt: int) -> None:
    """Ask the moderation service about a prompt (urllib, no timeout)."""
    body = json.dumps({"prompt": prompt}).encode()
    with CLIENT.open(urllib.request.Request(url, data=body, method="POST")) as response:  # CULPRIT
        response.read()


def client(url: str, info: harness.RankInfo, request_every_s: float, ready: bool = True) -> None:
    """A user of the service (here in rank 0's process, where the address is known): a
    prompt every ``request_every_s``; ``ready``: rank 0 is ready once the first is answered."""
    for number in range(10_000):
        body = json.dumps({"prompt": number % VOCAB, "tokens": TOKENS}).encode()
        with CLIENT.open(urllib.request.Request(url, data=body, method="POST")) as response:
            response.read()
        if number == 0 and ready:
            harness.report_ready(info, "serving, idle between requests", role="healthy")
        time.sleep(request_every_s)


#: Set by main(thread_called=True): the server started by mistake with
#: Thread(target=server.serve_forever()), which serves on the main thread all the same.
THREAD_CALLED = False


def start_server(server: http.server.ThreadingHTTPServer) -> None:
    """The service's accept loop, on this (the main) thread."""
    if THREAD_CALLED:
        threading.Thread(target=server.serve_forever(), daemon=True).start()  # the mistake
        while True:  # never reached: the call above serves for ever
            time.sleep(3600)
    server.serve_forever()


def main(stuck_rank: int | None = None, request_every_s: float = REQUEST_EVERY_S,
         moderation_stalls: bool = False, thread_called: bool = False) -> None:
    """``stuck_rank``: that rank's shard never answers the second request (the hung twin,
    generation_server_worker_stuck); ``moderation_stalls``: the moderation service rank 0 asks
    from the second request on never answers (generation_server_request_stuck);
    ``thread_called``: the server is started with its loop called as a Thread's target, and
    serves anyway (healthy_service_thread_called)."""
    global THREAD_CALLED
    THREAD_CALLED = thread_called
    info = harness.setup()
    harness.init_distributed(info)
    model = ShardedModel(info.rank)
    if stuck_rank is not None:
        model.stuck = info.rank == stuck_rank
        model.info = info
    if info.rank == 0:
        moderation = None
        if moderation_stalls:
            service = unresponsive_service()
            moderation = "http://{}:{}/moderate".format(*service.getsockname())
        serve(model, info, request_every_s, moderation)
        return
    answered = 0
    while True:
        command, prompt, tokens = broadcast_command(0, 0, 0)
        if command == GENERATE:
            model.generate([prompt], tokens)
            answered += 1
            if answered == 1 and stuck_rank is None:
                harness.report_ready(info, "waiting for the next command",
                                     role="waiting" if moderation_stalls else "healthy")


if __name__ == "__main__":
    main()

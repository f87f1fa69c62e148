"""Scenario: a DataLoader worker forked while another thread held a lock: its copy stays locked.

Each rank keeps its token cache behind a module-level `threading.Lock`; a `cache-refresh`
thread reloads the cache on request, holding the lock for about a second. The DataLoader's
worker processes (fork, a new one each epoch) look tokens up under the same lock. On rank 1
the second epoch's iterator forks its worker while the refresh holds the lock: the child
inherits the lock locked and no thread that will release it, so the worker waits in `acquire`
for ever, idle, and rank 1's main thread waits for its first batch. The other ranks wait for
rank 1 in the gradient all_reduce. (The refresh is started just before the fork here, to make
the timing certain; in the wild it is a matter of luck, which is why it is so hard to find.)
"""

from __future__ import annotations

import threading
import time

import _harness as harness
import _training as training
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

EPOCH_STEPS = 3
EPOCHS = 1000
#: (rank, epoch) whose worker is forked during a refresh.
UNLUCKY = (1, 1)
REFRESH_S = 1.0

CACHE_LOCK = threading.Lock()
TOKEN_CACHE: dict[int, int] = {}


class CacheRefresher:
    """Reloads the token cache on request, on its own thread, holding CACHE_LOCK meanwhile."""

    def __init__(self) -> None:
        self.requested = threading.Event()
        self.holding = threading.Event()
        threading.Thread(target=self._run, name="cache-refresh", daemon=True).start()

    def _run(self) -> None:
        while True:
            self.requested.wait()
            self.requested.clear()
            with CACHE_LOCK:
                self.holding.set()
                time.sleep(REFRESH_S)  # reading the cache file
                TOKEN_CACHE.update({i: i for i in range(1024)})
            self.holding.clear()

    def refresh(self) -> None:
        """Start a reload; returns once the reload holds the lock."""
        self.requested.set()
        self.holding.wait()


class TokenShard(Dataset):
    """This rank's batches; each looks its tokens up in the shared cache."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def __len__(self) -> int:
        return EPOCH_STEPS

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        with CACHE_LOCK:
            TOKEN_CACHE.get(index)
        return training.synthetic_batch(self.rank, index)


def main() -> None:
    info = harness.setup()
    harness.init_distributed(info)
    model = training.build_model()
    refresher = CacheRefresher()
    loader = DataLoader(TokenShard(info.rank), batch_size=None, num_workers=1)
    step = 0
    for epoch in range(EPOCHS):
        if epoch == UNLUCKY[1]:
            if info.rank == UNLUCKY[0]:
                harness.report_ready(info, f"epoch {epoch}: worker forked holding the cache lock",
                                     role="culprit")
                refresher.refresh()
            else:
                harness.report_ready(info, f"epoch {epoch}: gradient all_reduce", role="waiting")
        for batch in loader:  # CULPRIT
            loss = training.train_step(model, batch)
            harness.log(info, f"step {step} loss {loss:.4f}")
            step += 1
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

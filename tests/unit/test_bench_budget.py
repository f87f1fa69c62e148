"""The attach benchmark's budget verdict: "slower" needs the median's whole interval above 1."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_attach.py"


def _median_interval():
    spec = importlib.util.spec_from_file_location("bench_attach", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.median_interval


def test_a_tie_with_noise_is_not_slower_and_a_clear_slowdown_is():
    median_interval = _median_interval()
    # GIVEN attach/manual ratios of 15 alternating pairs: a noisy tie (a real run), and a
    # collector 10% slower than the manual procedure with the same spread
    tie = [0.94, 0.95, 0.95, 0.98, 0.99, 1.00, 1.00, 1.01, 1.05, 1.05, 1.07, 1.09, 1.10, 1.12, 1.34]
    slower = [r + 0.12 for r in tie]
    # WHEN / THEN the tie's interval reaches below 1 (not evidence of slower), the slowdown's
    # lies wholly above it; the interval is the same on every call
    low, high = median_interval(tie)
    assert low < 1.0 < high
    assert median_interval(slower)[0] > 1.0
    assert median_interval(tie) == (low, high)

"""A rank that works alone before it joins the process group while the others wait in
init_process_group (`slow_start_rank`, recorded by `make accuracy`) is a slow start or a hang,
which a look of seconds cannot tell apart; one idle in a call there (`slow_start_stuck`) is a
straggler."""

from __future__ import annotations

from snapfactory import recorded

from slurmdiag.analysis import diagnose


def verdict(name: str):  # type: ignore[no-untyped-def]
    return diagnose(recorded(f"{name}.default.startup")).verdicts[0]


def test_a_rank_working_before_it_joins_is_a_slow_start_or_a_hang() -> None:
    v = verdict("slow_start_rank")
    # it was spinning, critical
    assert (v.kind, v.severity, v.culprit_ranks) == ("slow_step", "info", (3,)), v
    assert "a slow start or a hang" in v.summary
    assert any("before joining the process group while the others wait for it in "
               "init_process_group" in e for e in v.evidence), v.evidence
    assert v.sites[0].endswith("slow_start_rank.py:build_shard_index")


def test_a_rank_idle_in_a_call_before_it_joins_is_a_straggler() -> None:
    v = verdict("slow_start_stuck")
    assert (v.kind, v.severity, v.culprit_ranks) == ("straggler", "critical", (3,)), v
    assert v.sites[0].endswith("slow_start_rank.py:47")

"""Groups of every rank named by the job's own locals (groups.py): a dict of
``dist.new_group(all ranks)`` results, one a task (metric_group_order, recorded by
``make accuracy``). Every main thread waits at one all_reduce line; only the group differs.
Before: "every known rank waits in all_reduce ... the cause is below Python", no culprit."""

from __future__ import annotations

import pytest
from snapfactory import recorded

from slurmdiag.analysis import diagnose
from slurmdiag.analysis.groups import read_groups
from slurmdiag.snapshot import Frame, Sample

PG = "<torch._C._distributed_c10d.ProcessGroup at 0x{:x}>"
FRAMES = (Frame("all_reduce", "/venv/torch/distributed/distributed_c10d.py", 3252),
          Frame("reduce_metrics", "/job/train.py", 50))


def _sample(collective: int, held: dict[str, int]) -> Sample:
    """A first-round --locals sample: the c10d frame's group and the job's dict (py-spy shows
    its first item only when it is long)."""
    items = ", ".join(f'"{k}": {PG.format(v)}' for k, v in held.items())
    return Sample(t=0.0, groups=((0, "group", PG.format(collective)),
                                 (1, "groups", "{" + items + ", ...}")))


@pytest.mark.parametrize("mode, severity", [("default", "critical"), ("samples1", "warning")])
def test_the_rank_on_the_other_task_group_is_named(mode: str, severity: str) -> None:
    v = diagnose(recorded(f"metric_group_order.{mode}")).verdicts[0]
    assert (v.kind, v.severity, v.culprit_ranks) == ("mismatched_collective", severity, (3,)), v
    assert "rank 3 waits in all_reduce on a group other than reduce_metrics's groups['qa']" in v.summary
    assert v.summary.endswith("the same collective (all_reduce) at one line on different process groups")


def test_a_name_holding_a_group_on_every_rank_names_the_collective_and_its_members() -> None:
    # ranks 0-2 all_reduce on the group their groups["qa"] holds; rank 3 on another one
    ranks = [(r, _sample(0x100 + r, {"qa": 0x100 + r}), FRAMES) for r in range(3)]
    ranks.append((3, _sample(0x900, {"qa": 0x300}), FRAMES))
    view = read_groups(ranks, 4)
    name = "reduce_metrics's groups['qa']"
    assert dict(view.collective) == {0: name, 1: name, 2: name, 3: f"a group other than {name}"}
    assert view.members[name] == (0, 1, 2, 3)


def test_names_that_alias_differently_across_ranks_name_nothing() -> None:
    # "a" and "b" hold one group on rank 0 and two on rank 1: no one new_group call each (a
    # rank-dependent choice, `half = evens if even else odds` on a dict): not used
    def sample(rank: int) -> Sample:
        b = 0x10 if rank == 0 else 0x20 + rank
        return Sample(t=0.0, groups=((0, "group", PG.format(0x10 + (rank == 1))),
                                     (1, "a", PG.format(0x10 + (rank == 1))),
                                     (1, "b", PG.format(b))))

    view = read_groups(((r, sample(r), FRAMES) for r in range(2)), 2)
    assert dict(view.collective) == {}


def test_every_rank_on_its_named_group_is_one_group() -> None:
    # the healthy sight: every rank's collective is the group its dict names
    view = read_groups(((r, _sample(0x100 + r, {"qa": 0x100 + r}), FRAMES) for r in range(4)), 4)
    assert set(view.collective.values()) == {"reduce_metrics's groups['qa']"}


def test_without_the_world_size_no_name_holds_for_every_rank() -> None:
    ranks = [(r, _sample(0x100 + r, {"qa": 0x100 + r}), FRAMES) for r in range(3)]
    assert dict(read_groups(ranks, None).collective) == {}


def test_a_list_py_spy_cut_short_keeps_the_items_it_shows() -> None:
    # py-spy 0.4 prints a list of two or more groups as its first item and "..." (measured:
    # `[<torch._C._distributed_c10d.ProcessGroup at 0x7f098b31eb70>, ...]`)
    def sample(rank: int) -> Sample:
        first = 0x100 + rank
        return Sample(t=0.0, groups=((0, "group", PG.format(first if rank < 3 else 0x900)),
                                     (1, "step_groups", f"[{PG.format(first)}, ...]")))

    view = read_groups(((r, sample(r), FRAMES) for r in range(4)), 4)
    name = "reduce_metrics's step_groups[0]"
    assert dict(view.collective) == {0: name, 1: name, 2: name, 3: f"a group other than {name}"}


@pytest.mark.parametrize("mode", ["default", "samples1"])
def test_the_rank_a_step_behind_on_the_other_group_of_a_list_is_named(mode: str) -> None:
    # group_parity_resume: all_reduce on comm_groups[step % 2], rank 3 resumed a step behind;
    # each rank's list shown as `[<group>, ...]` (before: not read, all_waiting)
    v = diagnose(recorded(f"group_parity_resume.{mode}")).verdicts[0]
    assert (v.kind, v.culprit_ranks) == ("mismatched_collective", (3,)), v
    assert "rank 3 waits in all_reduce on average_gradients's comm_groups[0]" in v.summary

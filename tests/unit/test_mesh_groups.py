"""A 2-D mesh (`mesh_tp_mismatch`, recorded by `make accuracy`): tensor-parallel pairs {0, 1},
{2, 3} and data-parallel pairs {0, 2}, {1, 3}, each group kept in a list of new_group results.
Rank 3 all_gathers on its tp pair where rank 2 all_reduces; ranks 0 and 1 wait in dp's
all_reduce for 2 and 3. Before: the lists were not read (groups inferred) and the verdict named
2 and 3 with high confidence as the ranks off the largest class; once the lists were read, all
four ranks stood apart and all four were named."""

from __future__ import annotations

import pytest
from snapfactory import recorded

from slurmdiag.analysis import diagnose
from slurmdiag.analysis.groups import read_groups
from slurmdiag.snapshot import Frame, Sample

PG = "<torch._C._distributed_c10d.ProcessGroup at 0x{:x}>"


def test_a_list_of_new_group_results_is_read_item_by_item() -> None:
    frames = (Frame("train", "/job/train.py", 40),)

    def sample(rank: int) -> Sample:
        tp = [PG.format(0x10 + rank) if rank // 2 == i else "-100" for i in range(2)]
        mixed = f"[{PG.format(0x30)}, 'x']"  # not a list of groups: not read
        return Sample(t=0.0, groups=((0, "tp_groups", f"[{', '.join(tp)}]"), (0, "other", mixed)))

    view = read_groups(((r, sample(r), frames) for r in range(4)), 4)
    assert dict(view.members) == {"train's tp_groups[0]": (0, 1), "train's tp_groups[1]": (2, 3)}


@pytest.mark.parametrize("mode, severity", [("default", "critical"), ("samples1", "warning")])
def test_the_ranks_waiting_on_other_groups_step_aside_and_the_pair_is_named(mode: str,
                                                                             severity: str) -> None:
    v = diagnose(recorded(f"mesh_tp_mismatch.{mode}")).verdicts[0]
    assert (v.kind, v.severity, v.culprit_ranks) == ("mismatched_collective", severity, (2, 3)), v
    # which of the two diverged is not in the stacks (a known miss: rank 3 did): said so
    assert v.confidence == "medium"
    assert "cannot tell which side diverged" in v.summary
    assert v.summary.endswith("; ranks 0-1 wait for them on other groups"), v.summary
    assert any(line.startswith("rank 0 waits on train's dp_groups[0] (ranks 0,2) for rank 2")
               and "downstream" in line for line in v.evidence), v.evidence
    assert any(line.endswith("train's tp_groups[1] = 2-3") for line in v.evidence)

"""Words the snapshot, the analysis and every view share, defined once.

``str``-valued enums: a member compares and hashes equal to its string and serialises as it
(``json.dumps``, f-strings, templates), so snapshots written before these existed load unchanged
and the JSON stays the same. A snapshot read back holds plain strings; code compares against the
members, which works for both.
"""

from __future__ import annotations

from enum import Enum


class Word(str, Enum):
    """A member is its string everywhere: ``str()``, ``format()``, hashing, JSON."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)

    def __hash__(self) -> int:
        return str.__hash__(self)


class Severity(Word):
    """How loud a verdict or finding is; the order is the order of this class."""

    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


class NodeStatus(Word):
    """How a node's collection ended (``Node.status``, ``ProbeNode.status``)."""

    OK = "ok"
    TIMEOUT = "timeout"  # it started (said hello) but sent no complete document in time
    ERROR = "error"  # it answered with something unreadable, or failed
    UNREACHABLE = "unreachable"  # it never started (srun/ssh could not run the collector)


class VerdictKind(Word):
    """Every ``Verdict.kind`` slurmdiag writes (docs/snapshot.md, README "Verdicts")."""

    # the hang analysis (analysis/verdicts.py)
    MISSING_RANK = "missing_rank"
    STRAGGLER = "straggler"
    SPINNING = "spinning"
    MISMATCHED_COLLECTIVE = "mismatched_collective"
    ALL_WAITING = "all_waiting"
    IDLE = "idle"
    PROGRESSING = "progressing"
    SLOW_STEP = "slow_step"  # a short look at native compute while others wait: info, never an alarm
    INCOMPLETE = "incomplete"
    NO_RANKS = "no_ranks"
    # Flight Recorder dumps (analysis/flight.py)
    FLIGHT_RECORDER_MISMATCH = "flight_recorder_mismatch"
    FLIGHT_RECORDER_NOT_REACHED = "flight_recorder_not_reached"
    # network (analysis/nic.py)
    NIC_DOWN = "nic_down"
    NIC_LOOPBACK = "nic_loopback"
    NIC_MISMATCH = "nic_mismatch"
    NIC_ENV_MISSING_DEVICE = "nic_env_missing_device"
    NIC_MASTER_UNREACHABLE = "nic_master_unreachable"
    NIC_MTU_MISMATCH = "nic_mtu_mismatch"
    IB_PORT_DOWN = "ib_port_down"
    WATCHDOG_TIMEOUT = "watchdog_timeout"
    # GPUs (analysis/gpu.py)
    GPU_ECC = "gpu_ecc"
    GPU_FOREIGN_PROCESS = "gpu_foreign_process"
    GPU_ROWS_PENDING = "gpu_rows_pending"
    GPU_SMI_ERROR = "gpu_smi_error"
    GPU_SPIN_WAIT = "gpu_spin_wait"
    GPU_THROTTLE = "gpu_throttle"
    GPU_UNKNOWN_ERROR = "gpu_unknown_error"
    GPU_XID = "gpu_xid"
    # a job that ended (post_mortem/verdicts.py)
    CANCELLED = "cancelled"
    COLLECTIVE_TIMEOUT = "collective_timeout"
    COMPLETED = "completed"
    NODE_FAILURE = "node_failure"
    OUT_OF_MEMORY = "out_of_memory"
    RANK_CRASHED = "rank_crashed"
    RANK_KILLED = "rank_killed"
    RANK_EXCEPTION = "rank_exception"
    RANK_EXITED = "rank_exited"
    TIME_LIMIT = "time_limit"
    UNEXPLAINED = "unexplained"
    # the network probe (probe/analysis.py)
    PROBE_BAD_LINK = "probe_bad_link"
    PROBE_BAD_NODE = "probe_bad_node"
    PROBE_CLEAN = "probe_clean"
    PROBE_COLLECTIVE_FAILED = "probe_collective_failed"
    PROBE_MTU_MISMATCH = "probe_mtu_mismatch"
    PROBE_NO_PATH = "probe_no_path"
    PROBE_PATH_MTU = "probe_path_mtu"
    PROBE_SLOW_LINK = "probe_slow_link"
    PROBE_SLOW_NODE = "probe_slow_node"
    # `slurmdiag watch --test-notify`'s sample alert (watch/cli_support.py)
    TEST_MESSAGE = "test_message"


#: The hang verdicts: what is wrong with a job that is stuck (the watchdog alerts on these).
HANG_KINDS = (
    VerdictKind.MISSING_RANK,
    VerdictKind.STRAGGLER,
    VerdictKind.SPINNING,
    VerdictKind.MISMATCHED_COLLECTIVE,
    VerdictKind.ALL_WAITING,
    VerdictKind.IDLE,
)


_RANK = {member.value: index for index, member in enumerate(Severity)}


def severity_rank(severity: str) -> int:
    """0 for the most severe; an unknown word (a newer snapshot's) sorts after every known one."""
    return _RANK.get(str(severity), len(_RANK))


def known_severity(severity: str) -> str:
    """The severity as a known word, ``info`` for one this version does not know (for views)."""
    value = str(severity)
    return value if value in _RANK else Severity.INFO.value

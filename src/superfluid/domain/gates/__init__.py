"""The speculation gates of docs/contract.md §7, one small state machine each.

- `depth`: adaptive draft depth per lane count (model-based argmax of goodput);
- `yield_floor`: per-request yield verdicts and the per-model abandonment they can cause;
- `throughput`: speculate-or-plain per lane count from live measurements;
- `reprobe`: how long a throughput loss lasts before measuring again;
- `policy`: the per-model facade the executor talks to.

Time enters as numbers (seconds) passed in; nothing here reads a clock.
"""

from superfluid.domain.gates.depth import DepthController, DepthMode, best_depth
from superfluid.domain.gates.policy import PLAIN, SpecPolicy, TickPlan
from superfluid.domain.gates.reprobe import ReprobeOutcome, ReprobeSchedule
from superfluid.domain.gates.throughput import (
    GateTuning,
    Phase,
    RateSample,
    ThroughputGate,
    ThroughputVerdict,
)
from superfluid.domain.gates.yield_floor import RequestYield, StrategyStanding, YieldFloor

__all__ = [
    "PLAIN",
    "DepthController",
    "DepthMode",
    "GateTuning",
    "Phase",
    "RateSample",
    "ReprobeOutcome",
    "ReprobeSchedule",
    "RequestYield",
    "SpecPolicy",
    "StrategyStanding",
    "ThroughputGate",
    "ThroughputVerdict",
    "TickPlan",
    "YieldFloor",
    "best_depth",
]

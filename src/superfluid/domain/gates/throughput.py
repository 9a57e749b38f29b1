"""The throughput gate for one lane count (docs/contract.md §7, "Throughput gate").

Speculation is measured against plain decoding on live traffic, as committed tokens per second
of decode time, and kept only where it is at least `min_speedup` times faster.

    WARM_UP ──first drafted tick (not measured)──▶ PROBE_SPEC ⇄ PROBE_PLAIN, a tick of each in
    turn, until probe_ticks of each ──▶ decide (at the settling deadline without probe_ticks
    of each: undecided, measure on):
        spec_rate ≥ min_speedup × plain_rate  → SPECULATE for window_ticks drafted ticks, then
                                                 re-check (PROBE_PLAIN, the window as the spec
                                                 sample); early stop when the window's rate
                                                 falls below early_stop_ratio × plain_rate
        otherwise (a throughput loss)         → PLAIN until the re-probe wait (in finished
                                                 requests) is over, then WARM_UP again;
                                                 FINAL_PLAIN when re-probing is off

Measurement rules:
- The first speculating tick after the gate starts (and after each re-probe) warms up caches
  and compiled shapes, so it is not measured.
- A tick where nothing was drafted is a plain tick, whatever the gate asked for. In the probe
  phases (warm-up included) it feeds the plain sample, so a probe may need no forced plain tick;
  inside a SPECULATE window it is ignored, because the window judges drafted ticks.
- A tick whose clock did not advance (seconds ≤ 0, or not finite) is dropped: it says nothing.

Paired probes (ADR 0016): the sample with fewer ticks takes the next one, so a speculating tick
and a plain one are measured tens of milliseconds apart, at the same point of the same replies,
and a drift in the machine's speed falls on both. A window's re-check sets the window's drafted
ticks against plain ticks measured afresh.

Sizes (`GateTuning`, ADR 0007): copy-heavy replies alternate runs accepted whole with edits that
miss several rounds in a row, so a speculating probe spans more than one such stretch, and the
early stop waits `early_stop_ticks` drafted ticks before it judges a window.

Evidence (ADR 0014): a full probe decides only when the log of spec_rate / (min_speedup ×
plain_rate) lies `evidence` standard errors from zero (`RateSample.relative_variance`); a close
call measures another probe's worth each way. A loss also needs `early_stop_ticks` speculating
ticks: a wrong win is corrected within its window, a wrong loss only after `reprobe` requests.

Settling (ADR 0014): a probe ends within `settle_ticks` ticks at its lane count (every tick the
gate is shown counts; the policy shows it none on which no lane may draft). At that deadline it
decides only on a full probe's worth each way; short of that it is undecided and measures on,
its deadline resting for `undecided_wait` finished requests, so traffic that rarely drafts
(forced tool calls, short answers) is not judged on a handful of ticks.

Invariant: the gate holds no state about any other lane count.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from superfluid.domain.gates.reprobe import ReprobeOutcome, ReprobeSchedule


@dataclass(frozen=True, slots=True)
class GateTuning:
    """Sizes of the gate's measurements, in ticks."""

    probe_ticks: int = 24
    window_ticks: int = 256
    early_stop_ticks: int = 48
    early_stop_ratio: float = 0.9
    settle_ticks: int = 192
    evidence: float = 2.0
    #: Finished requests (of the model) a probe that ran out undecided measures on before its
    #: deadline runs again.
    undecided_wait: int = 4

    def __post_init__(self) -> None:
        if (
            self.probe_ticks < 1
            or self.window_ticks < 1
            or self.early_stop_ticks < 1
            or self.settle_ticks < 1
        ):
            raise ValueError("gate tick counts must be at least 1")
        if self.undecided_wait < 1:
            raise ValueError("an undecided probe waits at least 1 request")
        if not (math.isfinite(self.evidence) and self.evidence >= 0.0):
            raise ValueError("the gate's evidence must be a finite number of at least 0")


@dataclass(frozen=True, slots=True)
class RateSample:
    """Tokens committed over seconds of decode time, accumulated over some ticks, with the
    second moments that say how far the rate can be trusted (`relative_variance`)."""

    ticks: int = 0
    tokens: int = 0
    seconds: float = 0.0
    tokens_squared: float = 0.0
    seconds_squared: float = 0.0
    tokens_seconds: float = 0.0

    def plus(self, tokens: int, seconds: float) -> RateSample:
        return RateSample(
            self.ticks + 1,
            self.tokens + tokens,
            self.seconds + seconds,
            self.tokens_squared + tokens * tokens,
            self.seconds_squared + seconds * seconds,
            self.tokens_seconds + tokens * seconds,
        )

    @property
    def rate(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0.0 else None

    def at_least(self, factor: float, other: RateSample) -> bool:
        """self.rate ≥ factor × other.rate, cross-multiplied (both have seconds > 0)."""
        return self.tokens * other.seconds >= factor * other.tokens * self.seconds

    def relative_variance(self) -> float:
        """Var(rate) / rate², the ratio estimator's (delta method): the residuals
        e_i = tokens_i − rate·seconds_i of the ticks give Var ≈ n·Σe² / ((n−1)·(Σseconds)²).
        Infinite below two ticks or without tokens: nothing is known yet."""
        if self.ticks < 2 or self.tokens <= 0 or self.seconds <= 0.0:
            return math.inf
        rate = self.tokens / self.seconds
        residuals = (
            self.tokens_squared
            - 2.0 * rate * self.tokens_seconds
            + rate * rate * self.seconds_squared
        )
        n = self.ticks
        return max(residuals, 0.0) * n / ((n - 1) * self.tokens * self.tokens)


class Phase(enum.Enum):
    WARM_UP = "warm-up"
    PROBE_SPEC = "probe-spec"
    PROBE_PLAIN = "probe-plain"
    SPECULATE = "speculate"
    PLAIN = "plain"  # lost; waiting to re-probe
    FINAL_PLAIN = "final-plain"  # lost with re-probing off

    @property
    def speculates(self) -> bool:
        return self in (Phase.WARM_UP, Phase.PROBE_SPEC, Phase.SPECULATE)


@dataclass(frozen=True, slots=True)
class ThroughputVerdict:
    """One decision, kept for logs and /metrics: the rates compared, and over how many ticks
    each was measured (a verdict on a handful of ticks is one to distrust)."""

    speculate: bool
    spec_rate: float
    plain_rate: float
    spec_ticks: int = 0
    plain_ticks: int = 0
    wait: int | None = None  # requests until the re-probe, after a loss that re-probes
    at_deadline: bool = False  # decided by the settling deadline, the evidence still unclear
    #: No verdict: the probe ran out before a full probe's ticks each way. It measures on
    #: (speculating where it drafts), its deadline resting for `wait` requests.
    undecided: bool = False


def _measurable(committed: int, seconds: float) -> bool:
    if committed < 0:
        raise ValueError(f"a tick cannot commit {committed} tokens")
    return math.isfinite(seconds) and seconds > 0.0


class ThroughputGate:
    """Speculate or decode plainly, at one lane count, by measured throughput."""

    def __init__(
        self,
        *,
        min_speedup: float,
        reprobe: int,
        reprobe_max: int,
        tuning: GateTuning | None = None,
        requests_seen: int = 0,
    ) -> None:
        self.min_speedup = min_speedup
        self.tuning = tuning or GateTuning()
        self.schedule = ReprobeSchedule(reprobe=reprobe, reprobe_max=reprobe_max)
        self._phase = Phase.WARM_UP
        self._spec = RateSample()
        self._plain = RateSample()
        self._window = RateSample()
        self._plain_reference = RateSample()
        self._requests_seen = requests_seen
        self._reprobe_at: int | None = None
        self._probe_ticks = 0  # ticks seen since this probe began (the settling deadline)
        self._deadline_rests_until: int | None = None  # requests, after an undecided deadline
        self._needed = self.tuning.probe_ticks  # ticks each way before this probe may decide
        self.last_wait: int | None = None  # requests waited after the latest loss
        self.last_verdict: ThroughputVerdict | None = None

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def speculate(self) -> bool:
        return self._phase.speculates

    @property
    def reprobe_at(self) -> int | None:
        """The finished-request count at which a PLAIN gate measures again."""
        return self._reprobe_at if self._phase is Phase.PLAIN else None

    @property
    def spec_sample(self) -> RateSample:
        return self._spec

    @property
    def plain_sample(self) -> RateSample:
        return self._plain

    @property
    def window_sample(self) -> RateSample:
        return self._window

    # -- transitions ---------------------------------------------------------------------------

    def record_spec_tick(self, committed: int, seconds: float) -> None:
        """A tick that drafted something (an undrafted tick goes to record_plain_tick)."""
        measurable = _measurable(committed, seconds)
        if self._past_deadline():
            return
        match self._phase:
            case Phase.WARM_UP:
                self._phase = Phase.PROBE_SPEC  # warm-up: seen, not measured
            case Phase.PROBE_SPEC | Phase.PROBE_PLAIN:
                if measurable:
                    self._spec = self._spec.plus(committed, seconds)
                    self._advance_probe()
            case Phase.SPECULATE:
                if measurable:
                    self._window = self._window.plus(committed, seconds)
                    self._check_window()
            case Phase.PLAIN | Phase.FINAL_PLAIN:
                pass  # the gate said plain; nothing to learn from a stray tick

    def record_plain_tick(self, committed: int, seconds: float) -> None:
        """A tick that drafted nothing: asked-for plain, or speculation with no draft."""
        if self._past_deadline() or not _measurable(committed, seconds):
            return
        if self._phase in (Phase.WARM_UP, Phase.PROBE_SPEC, Phase.PROBE_PLAIN):
            self._plain = self._plain.plus(committed, seconds)
            if self._phase is not Phase.WARM_UP:
                self._advance_probe()

    def record_unmeasured_tick(self) -> None:
        """A tick at this lane count the gate does not judge (its drafts were still learning
        their depth); it counts towards the settling deadline only."""
        self._past_deadline()

    @property
    def probing(self) -> bool:
        return self._phase in (Phase.WARM_UP, Phase.PROBE_SPEC, Phase.PROBE_PLAIN)

    def requests_finished(self, total: int) -> None:
        """The model has now finished `total` requests; a due re-probe starts."""
        self._requests_seen = max(self._requests_seen, total)
        rests_until = self._deadline_rests_until
        if rests_until is not None and self._requests_seen >= rests_until:
            self._deadline_rests_until = None  # the probe's deadline runs again, from zero
            self._probe_ticks = 0
        if (
            self._phase is Phase.PLAIN
            and self._reprobe_at is not None
            and self._requests_seen >= self._reprobe_at
        ):
            self._spec = RateSample()
            self._plain = RateSample()
            self._reprobe_at = None
            self._probe_ticks = 0
            self._needed = self.tuning.probe_ticks
            self._phase = Phase.WARM_UP

    # -- internals -----------------------------------------------------------------------------

    def _past_deadline(self) -> bool:
        """Count a tick of the probe; at the deadline, decide on what was measured. True when
        the tick ended the probe (it is then not recorded).

        A verdict needs a full probe's measured ticks each way (`probe_ticks`): short of
        that, the probe is undecided and measures on, its deadline resting for
        `undecided_wait` finished requests, so the evidence it has gathered keeps growing
        until it can settle the question."""
        if not self.probing or self._deadline_rests_until is not None:
            return False
        self._probe_ticks += 1
        if self._probe_ticks < self.tuning.settle_ticks:
            return False
        floor = self.tuning.probe_ticks
        if self._spec.ticks >= floor and self._plain.ticks >= floor:
            self._decide()
            return True
        self._verdict(speculate=True, wait=self.tuning.undecided_wait, undecided=True)
        self._deadline_rests_until = self._requests_seen + self.tuning.undecided_wait
        self._probe_ticks = 0  # counted afresh once the rest is over
        return False

    def _advance_probe(self) -> None:
        needed = self._needed
        if self._spec.ticks >= needed and self._plain.ticks >= needed:
            if self._clear() and (self._wins() or self._spec.ticks >= self.tuning.early_stop_ticks):
                self._decide()
                return
            # A close call, or a loss on less speculation than an early stop needs: another
            # probe's worth each way (the settling deadline still holds).
            self._needed += self.tuning.probe_ticks
        self._phase = self._next_probe_phase()

    def _next_probe_phase(self) -> Phase:
        """Paired measurement: the sample that is behind takes the next tick, so speculating
        and plain ticks alternate and each pair is measured tens of milliseconds apart."""
        spec, plain, needed = self._spec.ticks, self._plain.ticks, self._needed
        if spec < needed and (spec <= plain or plain >= needed):
            return Phase.PROBE_SPEC
        return Phase.PROBE_PLAIN

    def _clear(self) -> bool:
        """Whether the measured rates settle the question: their log-ratio (against the
        speed-up asked for) lies `evidence` standard errors or more from zero. On fewer ticks a
        verdict is a coin toss where the two are close; the settling deadline bounds the wait."""
        spec, plain = self._spec.rate, self._plain.rate
        if spec is None or plain is None or spec <= 0.0 or plain <= 0.0:
            return True  # nothing committed on a side: no amount of waiting makes it closer
        gap = math.log(spec / (self.min_speedup * plain))
        spread = self._spec.relative_variance() + self._plain.relative_variance()
        return gap * gap >= self.tuning.evidence**2 * spread

    def _wins(self) -> bool:
        return self._spec.at_least(self.min_speedup, self._plain)

    def _decide(self) -> None:
        self._deadline_rests_until = None
        if self._wins():
            self._verdict(speculate=True)
            self.schedule.on_win()
            self._plain_reference = self._plain
            self._window = RateSample()
            self._phase = Phase.SPECULATE
            return
        self._lose()

    def _lose(self) -> None:
        self._deadline_rests_until = None
        outcome, wait = self.schedule.on_loss()
        if outcome is ReprobeOutcome.FINAL:
            self._verdict(speculate=False)
            self._phase = Phase.FINAL_PLAIN
            return
        self.last_wait = wait
        self._verdict(speculate=False, wait=wait)
        self._reprobe_at = self._requests_seen + wait
        self._phase = Phase.PLAIN

    def _verdict(
        self,
        *,
        speculate: bool,
        wait: int | None = None,
        undecided: bool = False,
    ) -> None:
        self.last_verdict = ThroughputVerdict(
            speculate=speculate,
            spec_rate=self._spec.rate or 0.0,
            plain_rate=self._plain.rate or 0.0,
            spec_ticks=self._spec.ticks,
            plain_ticks=self._plain.ticks,
            wait=wait,
            at_deadline=self._probe_ticks >= self.tuning.settle_ticks,
            undecided=undecided,
        )

    def _check_window(self) -> None:
        window, tuning = self._window, self.tuning
        over = window.ticks >= tuning.window_ticks
        falling = window.ticks >= tuning.early_stop_ticks and not window.at_least(
            tuning.early_stop_ratio, self._plain_reference
        )
        if over or falling:
            # Re-check: the window is the speculating sample; plain is measured afresh (a
            # fresh paired probe would spend as many plain ticks again; ADR 0016).
            self._spec = window
            self._plain = RateSample()
            self._window = RateSample()
            self._probe_ticks = 0
            self._needed = self.tuning.probe_ticks
            self._phase = Phase.PROBE_PLAIN

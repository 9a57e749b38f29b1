"""Counter-based uniforms: the noise behind a sampled token is a pure function of where it sits.

Rule: `uniform(seed, pos, stream)` depends on its three arguments and nothing else — no hidden
generator state, no clock, no draw order.

Why counter-based rather than a stateful generator: a speculating lane verifies k+1 positions in
one pass and throws away whatever follows the first mismatch, so the number of draws it makes
depends on how its drafts fared. A stateful generator would then hand the next token a different
uniform than plain decoding would, and the two lanes would drift apart after the first rejection.
With a counter the token at stream position `pos` always meets `uniform(seed, pos)`, whether it
is decoded plainly or verified inside a draft, so a deterministic draft yields exactly the plain
lane's tokens.

Streams: `pos` is the index of the token in the lane's sampled stream (the executor picks one
definition, e.g. the number of completion tokens before it, and uses it for plain and speculative
decoding alike). Independent draws at the same position come from distinct `stream` values:

- `STREAM_SAMPLE` (0): the plain sampler's draw, also the bonus draw of a rejection round;
- `STREAM_ACCEPT`: the accept/reject coin of rejection sampling;
- `STREAM_RESIDUAL`: the draw from the residual distribution after a rejection;
- `STREAM_DRAFT`: a drafter sampling its proposal from its own distribution q.

Algorithm: the (seed, stream) pair is hashed into a 64-bit key and the result is the pos-th
output of SplitMix64 started from that key, whose top 53 bits make a double in [0, 1).

Seeds, streams and positions may be any Python int: each is reduced modulo 2**64 (two's
complement for negatives, as a C `uint64_t` cast would), so `seed` and `seed + 2**64` draw alike.
"""

from collections.abc import Callable

_MASK64 = (1 << 64) - 1
_GOLDEN_GAMMA = 0x9E3779B97F4A7C15  # SplitMix64's increment: an odd constant near 2**64/phi
_STREAM_GAMMA = 0xD1B54A32D192ED03  # a second odd constant so stream keys do not track seed keys
_DOUBLE_UNIT = 1.0 / (1 << 53)

STREAM_SAMPLE = 0
STREAM_ACCEPT = 1
STREAM_RESIDUAL = 2
STREAM_DRAFT = 3

UniformSource = Callable[[int, int], float]
"""A source of uniforms in [0, 1) addressed by (stream, pos); pure for a fixed seed."""


def _mix64(z: int) -> int:
    """SplitMix64's finaliser: a bijection on 64-bit ints with full avalanche."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _stream_key(seed: int, stream: int) -> int:
    return _mix64((_mix64(seed & _MASK64) + (stream & _MASK64) * _STREAM_GAMMA) & _MASK64)


def uniform(seed: int, pos: int, stream: int = STREAM_SAMPLE) -> float:
    """The uniform in [0, 1) for stream position `pos` of `stream` under `seed`."""
    state = (_stream_key(seed, stream) + ((pos & _MASK64) + 1) * _GOLDEN_GAMMA) & _MASK64
    return (_mix64(state) >> 11) * _DOUBLE_UNIT


def counter_uniforms(seed: int) -> UniformSource:
    """The `UniformSource` of a seed: `(stream, pos) -> uniform(seed, pos, stream)`."""
    key_by_stream: dict[int, int] = {}

    def draw(stream: int, pos: int) -> float:
        # Caching the per-stream key only saves work; the value is the same as `uniform`'s.
        key = key_by_stream.get(stream)
        if key is None:
            key = key_by_stream[stream] = _stream_key(seed, stream)
        state = (key + ((pos & _MASK64) + 1) * _GOLDEN_GAMMA) & _MASK64
        return (_mix64(state) >> 11) * _DOUBLE_UNIT

    return draw

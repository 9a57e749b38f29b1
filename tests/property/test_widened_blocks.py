"""Any Q5_0 block, widened to Q8_0, keeps every weight's value exactly."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from superfluid.adapters.llamacpp.widened_weights import q5_0_as_q8_0
from tests.unit.test_widened_weights import q5_0_values, q8_0_values

finite_scales = st.floats(width=16, allow_nan=False, allow_infinity=False)


@given(
    st.lists(
        st.tuples(finite_scales, st.integers(0, 2**32 - 1), st.binary(min_size=16, max_size=16)),
        min_size=1,
        max_size=8,
    )
)
def test_a_widened_block_has_the_same_scale_and_the_same_integers(blocks):
    raw = b"".join(
        np.float16(d).tobytes() + int(qh).to_bytes(4, "little") + qs for d, qh, qs in blocks
    )
    widened = q5_0_as_q8_0(np.frombuffer(raw, dtype=np.uint8)).tobytes()

    assert len(widened) == 34 * len(blocks)
    assert np.array_equal(q8_0_values(widened), q5_0_values(raw))
    assert all(widened[34 * i : 34 * i + 2] == raw[22 * i : 22 * i + 2] for i in range(len(blocks)))

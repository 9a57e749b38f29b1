from superfluid.domain.gates.ramp import PROBE_DEPTH, DraftRamp


def test_without_evidence_the_policy_depth_applies():
    assert DraftRamp().cap(7) == 7


def test_a_miss_drops_the_next_draft_to_a_short_probe():
    ramp = DraftRamp()
    ramp.record(drafted=7, accepted=3)
    assert ramp.cap(7) == PROBE_DEPTH


def test_whole_acceptances_grow_the_cap_fourfold_up_to_the_policy_depth():
    ramp = DraftRamp()
    ramp.record(7, 0)
    caps = []
    for _ in range(4):
        cap = ramp.cap(15)
        caps.append(cap)
        ramp.record(cap, cap)
    assert caps == [2, 8, 15, 15]


def test_the_cap_never_exceeds_the_policy_depth_nor_drops_below_one():
    ramp = DraftRamp()
    ramp.record(4, 4)
    assert ramp.cap(3) == 3
    ramp.record(4, 1)
    assert ramp.cap(1) == 1


def test_an_undrafted_round_is_no_evidence():
    ramp = DraftRamp()
    ramp.record(0, 0)
    assert ramp.cap(9) == 9

import pytest

from superfluid.domain.gates.reprobe import ReprobeOutcome, ReprobeSchedule


def waits(schedule, losses):
    return [schedule.on_loss()[1] for _ in range(losses)]


def test_each_repeated_loss_doubles_the_wait_up_to_the_ceiling():
    schedule = ReprobeSchedule(reprobe=32, reprobe_max=1024)
    assert waits(schedule, 8) == [32, 64, 128, 256, 512, 1024, 1024, 1024]


def test_a_ceiling_that_is_not_a_power_of_two_multiple_is_still_the_cap():
    schedule = ReprobeSchedule(reprobe=10, reprobe_max=50)
    assert waits(schedule, 5) == [10, 20, 40, 50, 50]


def test_a_win_resets_the_wait_to_reprobe():
    schedule = ReprobeSchedule(reprobe=32, reprobe_max=1024)
    waits(schedule, 3)
    schedule.on_win()
    assert schedule.losses_in_a_row == 0
    assert waits(schedule, 2) == [32, 64]


def test_reprobe_zero_makes_every_loss_final():
    schedule = ReprobeSchedule(reprobe=0, reprobe_max=1024)
    assert schedule.final
    assert schedule.on_loss() == (ReprobeOutcome.FINAL, 0)


def test_a_ceiling_below_reprobe_never_shortens_the_first_wait():
    schedule = ReprobeSchedule(reprobe=64, reprobe_max=16)
    assert waits(schedule, 3) == [64, 64, 64]


def test_a_negative_reprobe_is_refused():
    with pytest.raises(ValueError):
        ReprobeSchedule(reprobe=-1, reprobe_max=10)

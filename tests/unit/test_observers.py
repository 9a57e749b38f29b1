import logging

from superfluid.adapters.observers import FanOut
from superfluid.application.events import Committed, Finish, SpecStats, TickReport

REPORT = TickReport(1, 1, 0, 1, 0, 0, 0.01)
DONE = Committed(1, (), SpecStats(), Finish.STOP)


class Recorder:
    def __init__(self):
        self.seen = []

    def tick(self, model, report, active_lanes):
        self.seen.append(("tick", model, report, active_lanes))

    def finished(self, model, event, generated):
        self.seen.append(("finished", model, event, generated))


class Broken:
    def tick(self, model, report, active_lanes):
        raise RuntimeError("tick broke")

    def finished(self, model, event, generated):
        raise RuntimeError("finished broke")


def test_every_observer_hears_every_report():
    one, two = Recorder(), Recorder()
    fan = FanOut([one, two])
    fan.tick("m", REPORT, 1)
    fan.finished("m", DONE, 3)
    expected = [("tick", "m", REPORT, 1), ("finished", "m", DONE, 3)]
    assert one.seen == expected and two.seen == expected


def test_a_failing_observer_is_logged_and_the_others_still_hear(caplog):
    after = Recorder()
    fan = FanOut([Broken(), after])
    with caplog.at_level(logging.ERROR, logger="superfluid"):
        fan.tick("m", REPORT, 1)
        fan.finished("m", DONE, 3)
    assert [entry[0] for entry in after.seen] == ["tick", "finished"]
    assert len(caplog.records) == 2
    assert "failed on a tick of m" in caplog.records[0].getMessage()

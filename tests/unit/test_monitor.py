import io
import logging

import pytest
from rich.console import Console

from superfluid.adapters.monitor import (
    ModelView,
    TerminalMonitor,
    acceptance_text,
    render_table,
    summary_line,
)
from superfluid.application.events import Committed, Finish, SpecStats, TickReport


class Clock:
    def __init__(self, now=0.0):
        self.now = now

    def __call__(self):
        return self.now


class Tty(io.StringIO):
    def isatty(self):
        return True


def report(*, prefill=0, committed=0, drafted=0, accepted=0, seconds=0.1):
    return TickReport(1, 1, prefill, committed, drafted, accepted, seconds)


def view(**overrides):
    fields = dict(
        name="gemma.gguf",
        lanes=2,
        capacity=4,
        decode_rate=61.24,
        prefill_rate=410.4,
        proposed=100,
        accepted=73,
    )
    fields.update(overrides)
    return ModelView(**fields)


def log_monitor(clock, **kwargs):
    kwargs.setdefault("live", False)
    kwargs.setdefault("interval", 10.0)
    return TerminalMonitor(clock=clock, **kwargs)


def rendered(table):
    out = io.StringIO()
    Console(file=out, width=120).print(table)
    return out.getvalue()


def test_the_summary_line_names_lanes_rates_and_acceptance():
    assert summary_line(view()) == (
        "gemma.gguf: lanes 2/4, decode 61.2 tok/s, prefill 410 tok/s, spec accept 73%"
    )


def test_without_a_known_capacity_the_line_shows_lanes_alone():
    assert "lanes 2, decode" in summary_line(view(capacity=None))


def test_spec_accept_is_accepted_over_proposed_as_a_percentage():
    assert acceptance_text(proposed=3, accepted=2) == "67%"
    assert acceptance_text(proposed=5, accepted=5) == "100%"
    assert acceptance_text(proposed=5, accepted=0) == "0%"


def test_spec_accept_is_a_dash_before_anything_was_proposed():
    assert acceptance_text(proposed=0, accepted=0) == "-"
    assert summary_line(view(proposed=0, accepted=0)).endswith("spec accept -")


def test_the_table_renders_every_field_of_every_model():
    text = rendered(render_table([view(), view(name="qwen.gguf", proposed=0, capacity=None)]))
    for field in ("gemma.gguf", "qwen.gguf", "2/4", "61.2", "410", "73%", "spec accept"):
        assert field in text
    assert "decode tok/s" in text and "prefill tok/s" in text
    qwen_row = next(line for line in text.splitlines() if "qwen.gguf" in line)
    assert qwen_row.rstrip(" │|").endswith("-")


def test_the_monitor_tallies_ticks_into_views():
    clock = Clock()
    monitor = log_monitor(clock, lane_capacity={"m": 4})
    monitor.tick("m", report(prefill=400, committed=1, seconds=0.5), 2)
    clock.now += 1
    monitor.tick("m", report(committed=6, drafted=8, accepted=5, seconds=0.1), 2)
    monitor.tick("m", report(committed=3, drafted=4, accepted=2, seconds=0.1), 3)
    (seen,) = monitor.snapshot()
    assert seen == ModelView(
        name="m",
        lanes=3,
        capacity=4,
        decode_rate=pytest.approx(10 / 0.7),
        prefill_rate=pytest.approx(800.0),
        proposed=12,
        accepted=7,
    )


def test_models_with_a_known_capacity_are_shown_before_their_first_request():
    monitor = log_monitor(Clock(), lane_capacity={"a": 2, "b": 8})
    assert [v.name for v in monitor.snapshot()] == ["a", "b"]
    assert all(v.lanes == 0 and v.decode_rate is None for v in monitor.snapshot())


def test_no_line_is_written_before_the_interval_has_passed():
    clock = Clock()
    monitor = log_monitor(clock)
    monitor.tick("m", report(committed=5), 1)
    clock.now = 9.9
    assert monitor.due_lines() == []
    clock.now = 10.0
    assert len(monitor.due_lines()) == 1


def test_lines_are_written_only_when_something_happened_since_the_last_one():
    clock = Clock()
    monitor = log_monitor(clock, lane_capacity={"m": 4})
    clock.now = 10.0
    assert monitor.due_lines() == []  # nothing happened yet
    clock.now = 15.0
    monitor.tick("m", report(committed=5, drafted=4, accepted=3), 1)
    clock.now = 20.0
    assert monitor.due_lines() == ["m: lanes 1/4, decode 50.0 tok/s, spec accept 75%"]
    clock.now = 30.0
    assert monitor.due_lines() == []  # quiet since the last line
    monitor.finished("m", Committed(1, (), SpecStats(4, 3), Finish.STOP), 5)
    clock.now = 40.0
    assert monitor.due_lines() == [
        # the tick aged out of the 10 s window; the life-long acceptance stays
        "m: lanes 1/4, idle, spec accept 75%"
    ]


def test_only_the_models_that_did_something_get_a_line():
    clock = Clock()
    monitor = log_monitor(clock, lane_capacity={"a": 1, "b": 1})
    monitor.tick("b", report(committed=2), 1)
    clock.now = 10.0
    lines = monitor.due_lines()
    assert len(lines) == 1 and lines[0].startswith("b:")


def test_due_lines_go_to_the_superfluid_logger(caplog):
    clock = Clock()
    monitor = log_monitor(clock)
    clock.now = 5.0
    monitor.tick("m", report(committed=1), 1)
    clock.now = 10.0
    with caplog.at_level(logging.INFO, logger="superfluid"):
        monitor.emit_due()
    assert [r.getMessage() for r in caplog.records] == [
        "m: lanes 1, decode 10.0 tok/s, spec accept -"
    ]


def test_the_live_view_is_chosen_exactly_on_a_terminal():
    assert TerminalMonitor(stream=Tty()).live
    assert not TerminalMonitor(stream=io.StringIO()).live
    assert not TerminalMonitor(stream=Tty(), live=False).live


def test_the_live_view_draws_the_table_on_its_stream():
    stream = Tty()
    monitor = TerminalMonitor({"m": 4}, stream=stream)
    monitor.tick("m", report(committed=4, drafted=4, accepted=3), 2)
    monitor.start()
    monitor.stop()
    text = stream.getvalue()
    assert "spec accept" in text and "75%" in text and "2/4" in text


def test_the_line_thread_starts_and_stops():
    monitor = TerminalMonitor(live=False, interval=0.05)
    monitor.start()
    monitor.stop()
    assert monitor._thread is None


def test_the_interval_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        TerminalMonitor(live=False, interval=0)


def test_a_line_shows_prefill_only_while_something_prefills():
    clock = Clock()
    monitor = log_monitor(clock, lane_capacity={"m": 4})
    clock.now = 5.0
    monitor.tick("m", report(prefill=300, seconds=0.5), 1)
    clock.now = 10.0
    assert monitor.due_lines() == ["m: lanes 1/4, prefill 600 tok/s, spec accept -"]
    clock.now = 15.0
    monitor.tick("m", report(committed=5), 1)
    clock.now = 20.0
    (line,) = monitor.due_lines()
    assert "prefill" not in line and "decode 50.0 tok/s" in line


def test_the_table_shows_a_dash_for_work_that_did_not_happen():
    monitor = log_monitor(Clock(), lane_capacity={"m": 4})
    monitor.tick("m", report(committed=4), 1)
    row = next(line for line in rendered(monitor.renderable()).splitlines() if " m " in line)
    assert "40.0" in row and " 0 " not in row and "-" in row


def test_a_summary_line_on_stderr_carries_one_prefix(capsys):
    from superfluid.entrypoints.cli import _setup_logging

    logger = logging.getLogger("superfluid")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    try:
        _setup_logging()
        clock = Clock()
        monitor = TerminalMonitor({"m": 2}, clock=clock, live=False)
        clock.now = 5.0
        monitor.tick("m", report(committed=3), 1)
        clock.now = 10.0
        monitor.emit_due()
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
    assert capsys.readouterr().err.splitlines() == [
        "superfluid: m: lanes 1/2, decode 30.0 tok/s, spec accept -"
    ]

"""A refresh pass asks about every pending job again, a slice per cycle, within its duty."""

from __future__ import annotations

from rota_scheduler.refresh import RefreshPass

JOBS = ["a", "b", "c", "d", "e"]


def _pass(**kw: float) -> RefreshPass:
    return RefreshPass(interval_s=kw.get("interval_s", 10.0), duty=kw.get("duty", 0.5),
                       slice_size=int(kw.get("slice_size", 2)))


def _take(refresh: RefreshPass, epoch: float, pending: list[str] | None = None,
          room: int = 100) -> list[str]:
    waiting = JOBS if pending is None else pending
    return refresh.take(epoch, lambda: list(waiting), lambda job: job in waiting, room)


def test_a_pass_goes_a_slice_at_a_time_and_the_next_waits_for_the_interval() -> None:
    refresh = _pass()
    assert _take(refresh, 0.0) == ["a", "b"]
    assert _take(refresh, 0.1) == ["c", "d"]
    assert _take(refresh, 0.2) == ["e"]
    assert not refresh.in_pass
    assert _take(refresh, 9.9) == []  # the pass started at 0: not yet
    assert _take(refresh, 10.0) == ["a", "b"]


def test_each_slice_waits_until_the_pass_keeps_within_its_duty() -> None:
    refresh = _pass(duty=0.5)
    assert _take(refresh, 0.0) == ["a", "b"]
    refresh.spent(0.0, cpu_s=1.0)  # one CPU second at half a core: two seconds' room
    assert _take(refresh, 1.9) == []
    assert _take(refresh, 2.0) == ["c", "d"]


def test_a_slow_pass_starts_the_next_no_sooner_than_its_duty_allows() -> None:
    refresh = _pass(interval_s=1.0, duty=0.1, slice_size=10)
    assert _take(refresh, 0.0) == JOBS
    refresh.spent(0.0, cpu_s=0.5)
    assert _take(refresh, 4.9) == []  # past the interval, but within 0.5 s / 0.1
    assert _take(refresh, 5.0) == JOBS


def test_jobs_that_stopped_waiting_are_passed_over_and_new_ones_wait_for_the_next_pass() -> None:
    refresh = _pass(interval_s=0.0)
    assert _take(refresh, 0.0) == ["a", "b"]
    now_waiting = ["b", "d", "e", "f"]  # c was granted, f arrived
    assert _take(refresh, 1.0, now_waiting) == ["d", "e"]
    assert _take(refresh, 2.0, now_waiting) == ["b", "d"]  # a new pass, as the queue is now


def test_a_slice_fits_in_the_room_the_cycle_has_left() -> None:
    refresh = _pass(slice_size=4)
    assert _take(refresh, 0.0, room=0) == []
    assert _take(refresh, 0.0, room=1) == ["a"]
    assert _take(refresh, 0.0, room=4) == ["b", "c", "d", "e"]


def test_a_change_starts_the_next_pass_before_its_interval() -> None:
    refresh = _pass(interval_s=10.0, slice_size=10)
    assert refresh.take(0.0, lambda: JOBS, lambda job: True, 100, changes=1) == JOBS
    assert refresh.take(1.0, lambda: JOBS, lambda job: True, 100, changes=1) == []  # nothing new
    assert refresh.take(2.0, lambda: JOBS, lambda job: True, 100, changes=2) == JOBS  # a run ended
    refresh.spent(2.0, cpu_s=1.0)  # the duty still holds: two seconds at half a core
    assert refresh.take(3.0, lambda: JOBS, lambda job: True, 100, changes=3) == []
    assert refresh.take(4.0, lambda: JOBS, lambda job: True, 100, changes=3) == JOBS

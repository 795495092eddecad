"""sources/ahead.py: a generator run one item ahead on a helper thread (the list's next page)."""

from __future__ import annotations

import threading

import pytest

from mcsdns.sources.ahead import ahead
from testsupport.polling import eventually


def test_items_arrive_in_order_and_the_producer_runs_ahead_of_the_consumer() -> None:
    produced: list[int] = []
    second_made = threading.Event()

    def numbers():
        for i in range(5):
            produced.append(i)
            if i == 1:
                second_made.set()
            yield i

    items = ahead(numbers(), threading.Event(), "test-ahead")
    assert next(items) == 0
    # While the consumer holds item 0, the helper has made item 1 already (and is not limited to it).
    assert second_made.wait(5), "the helper did not produce the next item while the first was being used"
    assert list(items) == [1, 2, 3, 4]
    assert produced == [0, 1, 2, 3, 4]


def test_an_error_is_raised_to_the_consumer_after_the_items_before_it() -> None:
    class Broken(Exception):
        pass

    def failing():
        yield "a"
        yield "b"
        raise Broken("page 3")

    got: list[str] = []
    with pytest.raises(Broken, match="page 3"):
        for item in ahead(failing(), threading.Event(), "test-ahead"):
            got.append(item)
    assert got == ["a", "b"]


def test_a_consumer_that_stops_early_stops_the_producer_and_closes_it_on_its_thread() -> None:
    closed_on: list[str] = []

    def endless():
        i = 0
        try:
            while True:
                yield i
                i += 1
        finally:
            closed_on.append(threading.current_thread().name)

    items = ahead(endless(), threading.Event(), "test-ahead-endless")
    assert [next(items) for _ in range(3)] == [0, 1, 2]
    items.close()
    eventually(lambda: closed_on == ["test-ahead-endless"], 5, what=lambda: f"closed on {closed_on}")


def test_the_stop_signal_ends_the_consumer_while_the_producer_is_blocked() -> None:
    stop = threading.Event()
    release = threading.Event()

    def slow():
        yield 1
        release.wait(10)  # a request that takes long
        yield 2

    items = ahead(slow(), stop, "test-ahead-slow")
    assert next(items) == 1
    stop.set()
    assert list(items) == [], "set stop: the consumer gets no more items"
    release.set()

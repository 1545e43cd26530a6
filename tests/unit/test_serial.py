"""One call at a time on an object threads share (serial.py): another thread waits, except while the first sleeps."""

from __future__ import annotations

import threading

from fellows_fsm.serial import Serial, serialized


class Counter:
    """An object whose method holds its Serial while it sleeps through ``Serial.sleeping``."""

    def __init__(self) -> None:
        self.serial = Serial()
        self.log: list[str] = []

        self.sleeping = threading.Event()

    @serialized
    def work(self, name: str, pause: threading.Event | None = None) -> None:
        self.log.append(f"{name} in")
        if pause is not None:
            self.serial.sleeping(lambda _: (self.sleeping.set(), pause.wait(10)))(0.0)
        self.log.append(f"{name} out")


def test_another_thread_runs_only_while_the_holder_sleeps() -> None:
    """A call from a second thread runs inside the first call's sleep, never between two of its statements."""
    counter = Counter()
    resume = threading.Event()
    first = threading.Thread(target=counter.work, args=("a", resume))
    first.start()
    assert counter.sleeping.wait(10)
    second = threading.Thread(target=lambda: (counter.work("b"), resume.set()))
    second.start()
    first.join(timeout=10)
    second.join(timeout=10)
    assert counter.log == ["a in", "b in", "b out", "a out"]


def test_a_call_inside_a_call_of_the_same_thread_goes_on() -> None:
    """The lock is reentrant: a serialized method may call another on the same object."""
    counter = Counter()
    with counter.serial:
        counter.work("a")
    assert counter.log == ["a in", "a out"]

"""One call at a time on an object that threads share (``Fellows``): a decorator for its methods, and a sleep that
lets the other threads in while the calling one waits. It never starts a thread."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

__all__ = ["Serial", "serialized"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


class Serial:
    """A reentrant lock: a call made inside a call of the same thread goes on; another thread's waits."""

    def __init__(self) -> None:
        self._lock = threading.RLock()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def sleeping(self, sleep: Callable[[float], None]) -> Callable[[float], None]:
        """``sleep``, with the lock let go meanwhile (the calling thread holds it): another thread's call runs."""

        def wait(seconds: float) -> None:
            self._lock.release()
            try:
                sleep(seconds)
            finally:
                self._lock.acquire()

        return wait


class _HasSerial(Protocol):
    serial: Serial


_S = TypeVar("_S", bound=_HasSerial)


def serialized(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """A method run under its object's ``serial``."""

    @functools.wraps(method)
    def locked(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self.serial:
            return method(self, *args, **kwargs)

    return locked

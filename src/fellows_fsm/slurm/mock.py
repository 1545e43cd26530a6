"""The mock transport beside the real one (slurm/transport.py), for tests: SLURM commands answered by a function.

``MockTransport(handler)`` is the transport under the real SLURM port (httpx's pattern): ``handler(request)``
returns a ``Reply`` or raises what a transport raises (``NoAnswer``, ``SshLoginRefused``, ...). ``MockRunner`` is
the real CommandRunner over it (tests and benchmarks/fakectld.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fellows_fsm.slurm.runner import CommandResult, CommandRunner, RetryPolicy
from fellows_fsm.slurm.transport import Reply, Request

__all__ = ["MockRunner", "MockTransport", "ScriptedReply"]


class MockTransport:
    """A transport that answers every request with ``handler(request)``; ``requests`` records them in order.

    ``remote=True`` makes the port behave as over ssh (the script's content sent on stdin).
    """

    def __init__(self, handler: Callable[[Request], Reply], *, remote: bool = False) -> None:
        self.handler = handler
        self.remote = remote
        self.where = "in a MockTransport"
        self.reach_hint = "check the MockTransport's handler"
        self.peer = "the MockTransport"
        self.requests: list[Request] = []

    def run(self, request: Request) -> Reply:
        """Record ``request`` and return the handler's reply (or let its exception through)."""
        self.requests.append(request)
        return self.handler(request)


ScriptedReply = tuple[int, str, str] | Exception
"""One scripted answer of ``MockRunner.scripted``: ``(returncode, stdout, stderr)``, or an exception the transport
raises (``NoAnswer``, ``CommandMissing``, ``SshLoginRefused``)."""


class MockRunner(CommandRunner):
    """The real CommandRunner over ``MockTransport(handler)``: its retries, back-off, failure classification and
    counting run on what ``handler(request)`` answers (a ``Reply``) or raises (``NoAnswer``, ...).

    ``argvs`` and ``idempotent`` record each ``run()`` call (its argv, and whether it may be repeated); ``requests``
    every attempt the transport saw; ``slept`` the back-off sleeps, recorded instead of slept unless ``sleep`` is
    given; ``calls`` counts attempts per command as any CommandRunner does. ``remote=True`` behaves as over ssh.
    """

    def __init__(
        self,
        handler: Callable[[Request], Reply],
        *,
        remote: bool = False,
        retry: RetryPolicy | None = None,
        timeout_seconds: float = 30.0,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.mock = MockTransport(handler, remote=remote)
        self.slept: list[float] = []
        super().__init__(
            timeout_seconds=timeout_seconds,
            retry=retry,
            sleep=self.slept.append if sleep is None else sleep,
            transport=self.mock,
        )
        self.argvs: list[tuple[str, ...]] = []
        self.idempotent: list[bool] = []

    @classmethod
    def scripted(cls, replies: Mapping[str, Sequence[ScriptedReply]], **kwargs: Any) -> MockRunner:
        """A MockRunner answering each command (by program name) from its own script: the next scripted reply at
        each attempt, the last one repeating. A command with no script fails the test (AssertionError)."""
        scripts = {name: list(script) for name, script in replies.items()}

        def handler(request: Request) -> Reply:
            name = os.path.basename(request.argv[0])
            script = scripts.get(name)
            if not script:
                raise AssertionError(f"MockRunner.scripted has no reply for {name!r} (asked {list(request.argv)!r})")
            reply = script.pop(0) if len(script) > 1 else script[0]
            if isinstance(reply, Exception):
                raise reply
            returncode, stdout, stderr = reply
            return Reply(returncode, stdout, stderr, 0.001)

        return cls(handler, **kwargs)

    @property
    def requests(self) -> list[Request]:
        """Every request the transport was given (one per attempt), in order."""
        return self.mock.requests

    def run(
        self,
        argv: Sequence[str],
        *,
        idempotent: bool = True,
        timeout_seconds: float | None = None,
        retry: RetryPolicy | None = None,
        stdin: bytes | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        """Record the call, then run it exactly as CommandRunner.run does (retries and classification included)."""
        self.argvs.append(tuple(argv))
        self.idempotent.append(idempotent)
        return super().run(
            argv, idempotent=idempotent, timeout_seconds=timeout_seconds, retry=retry, stdin=stdin, cwd=cwd
        )

"""A call to the ledger under its deadline (ledger/deadline.py), on a socket pair standing for a server that hangs
with its socket open (it never answers, and the kernel acknowledges everything): past the deadline the socket is shut
down under the blocked read, which ends; a call that ends in time is left alone."""

from __future__ import annotations

import socket

from fellows_fsm.ledger.deadline import Deadline


def test_a_read_from_a_server_that_never_answers_ends_at_the_deadline() -> None:
    ours, server = socket.socketpair()
    with ours, server:
        ours.settimeout(30)  # (a hang detector only: the deadline is 0.2 s)
        with Deadline(ours.fileno(), 0.2) as deadline:
            data = ours.recv(16)
        assert data == b""  # the read ended: its socket was shut down under it
        assert deadline.cut


def test_a_call_that_ends_in_time_is_left_alone() -> None:
    ours, server = socket.socketpair()
    with ours, server:
        ours.settimeout(30)
        with Deadline(ours.fileno(), 30) as deadline:
            server.sendall(b"answer")
            assert ours.recv(16) == b"answer"
        assert not deadline.cut
        server.sendall(b"again")  # the socket still works after the call
        assert ours.recv(16) == b"again"

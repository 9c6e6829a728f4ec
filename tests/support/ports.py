"""Free TCP ports on the loopback interface."""

from __future__ import annotations

import errno
import random
import socket


def free_port() -> int:
    """A port nobody listens on right now (racy by nature: bind it soon)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Whether ``port`` on 127.0.0.1 can be bound right now (racy by nature: bind it soon)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            return False
        return True


def free_privileged_port() -> int:
    """A free loopback port below 1024 (the tests run as root): a dashboard plaintext on loopback
    must use one, since any user may bind the others while clusterd is down. Below the local
    stacks' dashboards (880 and up)."""
    for port in random.sample(range(600, 870), 270):
        if port_is_free(port):
            return port
    raise OSError("no free port from 600 to 869 on 127.0.0.1")

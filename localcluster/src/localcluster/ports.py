"""Free TCP ports on 127.0.0.1 for the local cluster's components and the tests' servers.

A port is chosen, released, and bound again by the program that serves it; in
between, anything may take it. Outgoing connections draw their local ports
from the kernel's ephemeral range, so on a busy machine (CI's two passes side
by side) a port chosen there is the likeliest to go. :func:`free_port` chooses
below that range; callers still retry on "address already in use".
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_DEFAULT_EPHEMERAL_LOW = 32768
_LOWEST = 10000
_TRIES = 50


def ephemeral_low() -> int:
    """The lowest port the kernel hands to outgoing connections."""
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return _DEFAULT_EPHEMERAL_LOW


def port_free(port: int) -> bool:
    """Whether nobody holds ``port`` on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port on 127.0.0.1 nobody holds now, below the ephemeral range when
    there is room there, else the kernel's own choice."""
    low = ephemeral_low()
    if low > _LOWEST + 1000:
        rng = random.SystemRandom()
        for _ in range(_TRIES):
            port = rng.randrange(_LOWEST, low)
            if port_free(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

"""Is a node's slurmd reachable? One TCP connect to its port, with a short timeout.

This is the second opinion that keeps detection from being trigger-happy: a rank that went silent
on a node whose slurmd still accepts connections is hung (or slow), not dead. A killed node
refuses at once; a powered-off one (link down) lets the connect time out.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol


class NodeProber(Protocol):
    async def reachable(self, address: str, port: int) -> bool: ...


class TcpProber:
    def __init__(self, timeout: float) -> None:
        self._timeout = timeout

    async def reachable(self, address: str, port: int) -> bool:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(address, port), self._timeout)
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True

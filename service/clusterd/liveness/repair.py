"""Return a node clusterd drained to service once the operator's health probe passes on it.

Slurm schedules no job on a drained node, so the probe (liveness.health says when one is due) goes
through a maintenance reservation of clusterd's own user on that node alone: reserve, resume the
node (the reservation keeps every other user's jobs off it), run the probe there with srun inside
the reservation, then

- it passed (exit 0): end the reservation. The node is in service; its record of failures starts
  anew and says when it returned;
- it failed, or did not run to its end: drain the node again, with a reason saying so, and only
  then end the reservation; the next probe is due an interval later.

The probe is ``[liveness] health_probe_command``: the operator's argv, run with clusterd's own
rights. Nothing a job sent goes into it. Only nodes Slurm shows drained with no job left and
responding are probed (a dead node's slurmd is back first); one node at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from clusterd.errors import SlurmError
from clusterd.liveness.health import NodeHealth
from clusterd.slurm.maintenance import NodeMaintenance
from clusterd.slurm.types import NodeState, SlurmNode

log = logging.getLogger(__name__)

RESERVATION_PREFIX = "clusterd-probe-"
_LOOK_SECONDS = 1.0  # how often due probes are looked for (in memory: cheap)
_OUTPUT_CHARS = 300  # of the probe's output, in clusterd's log


class HealthProbe:
    def __init__(
        self,
        health: NodeHealth,
        maintenance: NodeMaintenance,
        command: tuple[str, ...],
        *,
        nodes: Callable[[], dict[str, SlurmNode]],
        user: str,
        interval: float,
        timeout: float,
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        self._health = health
        self._maintenance = maintenance
        self._command = command
        self._nodes = nodes
        self._user = user  # the reservation's only user: clusterd's own
        self._interval = interval
        self._timeout = timeout
        self._leading = leading

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.check_once()
            except Exception:
                log.exception("health probe round failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), _LOOK_SECONDS)

    async def check_once(self) -> list[str]:
        """Probe the nodes whose probe is due; the nodes that passed (now back in service)."""
        if not self._command or not self._leading():
            return []
        nodes = self._nodes()
        passed = []
        for name in self._health.due_for_probe(self._interval):
            node = nodes.get(name)
            if node is None or not ready(node):
                continue
            self._health.probe_started(name)
            try:
                if await self._probe(name):
                    passed.append(name)
            except Exception:
                log.exception("node %s: health probe failed to run", name)
                self._health.probe_failed(name, "not run")
        return passed

    async def _probe(self, node: str) -> bool:
        reservation = RESERVATION_PREFIX + node
        m = self._maintenance
        try:
            try:
                await m.reserve(reservation, node, self._user, self._timeout)
            except SlurmError:  # one a clusterd stopped in mid-probe left (it would expire, too)
                await m.unreserve(reservation)
                await m.reserve(reservation, node, self._user, self._timeout)
        except SlurmError as exc:
            log.warning("node %s: no health probe: cannot reserve it (%s)", node, exc)
            self._health.probe_failed(node, "not run (no reservation)")
            return False
        try:
            await m.resume(node)
            result = await m.run_on(node, reservation, self._command, self._timeout)
        except SlurmError as exc:
            how, output = "did not finish", str(exc)
        else:
            if result.returncode == 0:
                with contextlib.suppress(SlurmError):  # else the reservation ends by itself within minutes
                    await m.unreserve(reservation)  # the node is in service from here
                self._health.returned(node)
                log.info("node %s: health probe passed; back in service", node)
                return True
            how, output = f"failed (exit {result.returncode})", result.stdout + result.stderr
        log.warning("node %s: health probe %s: %s", node, how, _one_line(output[-_OUTPUT_CHARS:]))
        reason = f"clusterd: health probe {how}; {self._health.reason(node)}"[:200]
        try:
            await m.drain(node, reason)
        except SlurmError as exc:
            # The reservation keeps other users off it until it expires: left in place.
            log.error("node %s: cannot drain it again after its health probe %s (%s)", node, how, exc)
            self._health.probe_failed(node, how)
            return False
        with contextlib.suppress(SlurmError):
            await m.unreserve(reservation)
        self._health.probe_failed(node, how)
        return False


def ready(node: SlurmNode) -> bool:
    """Drained with no job left, and its slurmd answering: a probe can run there."""
    return node.state is NodeState.DRAINED and "NOT_RESPONDING" not in {f.upper() for f in node.flags}


def _one_line(text: str) -> str:
    return text.strip().replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")

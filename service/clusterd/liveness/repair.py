"""Return a node clusterd drained to service once the operator's health probe passes on it.

Slurm schedules no job on a drained node, so the probe (liveness.health says when one is due) goes
through a maintenance reservation of clusterd's own user on that node alone: reserve, resume the
node (the reservation keeps every other user's jobs off it), run the probe there with srun inside
the reservation, then

- it passed (exit 0): end the reservation. The node is in service; its record of failures starts
  anew and says when it returned;
- it failed, did not run to its end, or anything at all went wrong after the resume (Slurm, a lost
  leadership, clusterd stopping): drain the node again, with a reason saying so, and only then end
  the reservation; the next probe is due an interval later. A drain that fails is tried again every
  few seconds, the reservation extended as needed, until it is done: the node stays clusterd's
  (its resumed state is no operator's resume) and never reaches a tenant unprobed.

A clusterd that stopped mid-probe, or a leader deposed mid-probe, leaves a reservation behind with
the node resumed in it. So whenever this replica starts leading, it drains the node of every
``clusterd-probe-*`` reservation ("health probe did not finish") and then deletes the reservation:
the node is probed again later.

The probe is ``[liveness] health_probe_command``: the operator's argv, run with clusterd's own
rights. Nothing a job sent goes into it. Only nodes Slurm shows drained with no job left and
responding are probed (a dead node's slurmd is back first); one node at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from clusterd.errors import SlurmError
from clusterd.liveness.health import NodeHealth
from clusterd.slurm.maintenance import NodeMaintenance
from clusterd.slurm.types import NodeState, SlurmNode

log = logging.getLogger(__name__)

RESERVATION_PREFIX = "clusterd-probe-"
_LOOK_SECONDS = 1.0  # how often due probes are looked for (in memory: cheap)
_OUTPUT_CHARS = 300  # of the probe's output, in clusterd's log
_RETRY_SECONDS = 10.0  # between tries of a drain still to be done
_AHEAD_MINUTES = 5  # a reservation whose drain is still to be done ends this much after each try
UNFINISHED = "clusterd: health probe did not finish"  # the drain of a probe left behind


@dataclass
class _Redrain:
    """A probed node whose drain failed: resumed still, inside its reservation, until it succeeds."""

    reason: str
    how: str
    tried_at: float = 0.0  # monotonic


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
        self._was_leading = False
        self._swept = False  # the reservations left by an earlier probe were dealt with
        self._swept_at = 0.0
        self._redrain: dict[str, _Redrain] = {}

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.check_once()
            except Exception:
                log.exception("health probe round failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), _LOOK_SECONDS)

    def lead(self) -> None:
        """This replica gained the leadership (told by the lease, however briefly it was lost): the
        reservations left behind are looked for again at the next round."""
        self._was_leading = False

    async def check_once(self) -> list[str]:
        """Probe the nodes whose probe is due; the nodes that passed (now back in service)."""
        if not self._command:
            return []
        if not self._leading():
            self._was_leading = False
            return []
        if not self._was_leading:  # leading from now on: anything left mid-probe is clusterd's to finish
            self._was_leading, self._swept, self._swept_at = True, False, 0.0
            for pending in self._redrain:
                self._health.probe_failed(pending, "did not finish")
            self._redrain.clear()  # another leader may have dealt with them: the sweep says
        await self._sweep()
        await self._redrain_all()
        nodes = self._nodes()
        passed = []
        for name in self._health.due_for_probe(self._interval):
            node = nodes.get(name)
            if node is None or not ready(node):
                continue
            self._health.probe_started(name)
            try:
                if await self._probe(node):
                    passed.append(name)
            except Exception:
                log.exception("node %s: health probe failed to run", name)
                self._health.probe_failed(name, "not run")
        return passed

    async def _probe(self, seen: SlurmNode) -> bool:
        node = seen.name
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
            result = await m.run_on(seen, reservation, self._command, self._timeout)
        except BaseException as exc:  # whatever happened, the resumed node is drained again
            how, output = "did not finish", str(exc) or type(exc).__name__
            await self._fail(node, how, output)
            if not isinstance(exc, Exception):
                raise
            return False
        if result.returncode == 0:
            with contextlib.suppress(SlurmError):  # else the reservation ends by itself within minutes
                await m.unreserve(reservation)  # the node is in service from here
            self._health.returned(node)
            log.info("node %s: health probe passed; back in service", node)
            return True
        await self._fail(node, f"failed (exit {result.returncode})", result.stdout + result.stderr)
        return False

    async def _fail(self, node: str, how: str, output: str) -> None:
        """Drain ``node`` again after its probe ``how``; when that fails, keep trying (_redrain_all)."""
        log.warning("node %s: health probe %s: %s", node, how, _one_line(output[-_OUTPUT_CHARS:]))
        reason = f"clusterd: health probe {how}; {self._health.reason(node)}"[:200]
        self._redrain[node] = _Redrain(reason, how)
        await self._drain_again(node)

    async def _drain_again(self, node: str) -> None:
        pending = self._redrain[node]
        pending.tried_at = time.monotonic()
        reservation = RESERVATION_PREFIX + node
        try:
            await self._maintenance.drain(node, pending.reason)
        except Exception as exc:  # the reservation keeps every other user off it meanwhile
            log.error("node %s: cannot drain it again after its health probe %s (%s)", node, pending.how, exc)
            await self._extend(node, reservation)
            return
        del self._redrain[node]
        with contextlib.suppress(Exception):
            await self._maintenance.unreserve(reservation)
        self._health.probe_failed(node, pending.how)

    async def _extend(self, node: str, reservation: str) -> None:
        """Keep the reservation (and so every other user off ``node``) while its drain is still to be done."""
        try:
            await self._maintenance.extend(reservation, _AHEAD_MINUTES)
        except Exception as exc:
            log.error("node %s: cannot extend reservation %s (%s)", node, reservation, exc)

    async def _redrain_all(self) -> None:
        now = time.monotonic()
        for node in [n for n, p in self._redrain.items() if now - p.tried_at >= _RETRY_SECONDS]:
            await self._drain_again(node)

    async def _sweep(self) -> None:
        """Drain the node of every probe reservation left behind, then delete the reservation."""
        if self._swept or time.monotonic() - self._swept_at < _RETRY_SECONDS:
            return
        self._swept_at = time.monotonic()
        m, done = self._maintenance, True
        try:
            left = await m.reservations(RESERVATION_PREFIX)
        except Exception as exc:
            log.warning("cannot list the health probes' reservations (%s)", exc)
            return
        for name in left:
            node = name.removeprefix(RESERVATION_PREFIX)
            if node in self._redrain:
                continue  # being drained again by this replica
            try:
                await m.drain(node, UNFINISHED)
            except Exception as exc:  # tried again at the next sweep
                log.error("node %s: cannot drain it after a health probe left unfinished (%s)", node, exc)
                await self._extend(node, name)
                done = False
                continue
            log.warning("node %s: drained: its health probe did not finish (reservation %s)", node, name)
            with contextlib.suppress(Exception):
                await m.unreserve(name)
            if not self._health.adopt(node, UNFINISHED):
                self._health.probe_failed(node, "did not finish")
        self._swept = done


def ready(node: SlurmNode) -> bool:
    """Drained with no job left, and its slurmd answering: a probe can run there."""
    return node.state is NodeState.DRAINED and "NOT_RESPONDING" not in {f.upper() for f in node.flags}


def _one_line(text: str) -> str:
    return text.strip().replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")

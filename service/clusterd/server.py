"""The clusterd service object: owns the gRPC server, the queue cache and reconciler, health and shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import pwd
import signal
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from clusterctl.v1 import cluster_pb2, cluster_pb2_grpc, jobs_pb2, jobs_pb2_grpc
from clusterd.api.cluster_servicer import ClusterServicer
from clusterd.api.interceptor import AuthInterceptor
from clusterd.api.views import JobViews
from clusterd.api.views_servicer import ViewsJobServicer
from clusterd.auth.tokens import TokenStore
from clusterd.config import Config
from clusterd.errors import SlurmError
from clusterd.goodput.autopilot import Autopilot, FailureHistory
from clusterd.goodput.failures import restore as restore_failures
from clusterd.goodput.publish import run as publish_goodput
from clusterd.goodput.report import GoodputReporter
from clusterd.ha.fencing import FencedBackend, FencedMaintenance
from clusterd.ha.leadership import Leadership
from clusterd.jobs.checkpoints import CheckpointViews
from clusterd.jobs.history import History
from clusterd.jobs.logs import JobLogs
from clusterd.jobs.manager import JobManager
from clusterd.liveness.detector import Detector, JobView
from clusterd.liveness.health import NodeHealth
from clusterd.liveness.heartbeats import HeartbeatService
from clusterd.liveness.probe import SlurmdProber
from clusterd.liveness.progress import ProgressRules
from clusterd.liveness.recall import recall
from clusterd.liveness.repair import HealthProbe
from clusterd.liveness.table import LivenessTable
from clusterd.observability.metrics import SLURM_INFO, STRAGGLERS, MetricsServer
from clusterd.placement import TopologyPlacer
from clusterd.security.audit import AuditLog
from clusterd.security.files import private_dir, private_files
from clusterd.security.limits import Quotas, RateLimiter
from clusterd.security.transport import check_transport, parse_cn_map, server_credentials
from clusterd.security.unixsock import prepare_socket_dir, secure_socket, socket_path
from clusterd.slurm.base import SlurmBackend
from clusterd.slurm.factory import make_backend
from clusterd.slurm.features import detect
from clusterd.slurm.maintenance import CommandsMaintenance
from clusterd.slurm.runner import CommandRunner
from clusterd.slurm.types import JobState
from clusterd.store.factory import open_store
from clusterd.supervisor.cache import QueueCache
from clusterd.supervisor.events import EventBus
from clusterd.supervisor.journal import EventJournal
from clusterd.supervisor.progress import ProgressBudget, ProgressReader
from clusterd.supervisor.reconciler import Reconciler
from clusterd.supervisor.restarts import Restarter
from clusterd.web.app import WebApp
from clusterd.web.server import check_web_transport, combined, serve

log = logging.getLogger(__name__)

# SERVING only on the replica that holds the supervisor lease (load balancers, `stack.sh kill-leader`).
LEADER_HEALTH = "clusterd.leader"
_EMBEDDED_EVENT_POLL_SECONDS = 5.0
_BEAT_HURRY_SECONDS = 2.0  # a job beats before the poll saw it running: poll often this long
_SERVICES = (
    jobs_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
    cluster_pb2.DESCRIPTOR.services_by_name["ClusterService"].full_name,
)


class ClusterDaemon:
    def __init__(self, config: Config, backend: SlurmBackend | None = None) -> None:
        """Raises ConfigError (unsafe transport, unreadable certificates), TokenFileError."""
        check_transport(config)
        check_web_transport(config)
        self._credentials = server_credentials(config.tls)
        path = socket_path(config.listen)
        self._socket = prepare_socket_dir(path, config.socket_group) if path is not None else None
        self.config = config
        self.backend = backend or make_backend(config.slurm)
        self._owns_backend = backend is None  # one it made holds connections (slurmrestd's) to close
        private_dir(Path(config.state_dir))
        with private_files():
            self.store = open_store(config)
            self.audit = AuditLog(config.audit_path)
        self.bus = EventBus(
            queue_size=config.limits.watch_queue_size,
            max_subscribers=config.limits.max_watchers,
            max_per_user=config.limits.max_watchers_per_user,
        )
        # Every event goes through the store's log to every replica's bus (resume tokens are its
        # positions); producers publish into the journal, watchers subscribe to the bus.
        ha = config.ha
        # Only a shared store has events other processes wrote: the embedded one's journal delivers
        # its own appends as it makes them and reads again now and then as a backstop, not ten
        # times a second.
        shared = bool(config.store.url)
        poll = ha.event_poll_seconds if shared else max(ha.event_poll_seconds, _EMBEDDED_EVENT_POLL_SECONDS)
        self.journal = EventJournal(
            self.store.events,
            self.bus,
            poll_seconds=poll,
            retention_seconds=ha.event_retention_seconds,
            sole_writer=not shared,
        )
        # One replica of several leads: it alone supervises (requeues, releases, marks nodes down),
        # and each of its Slurm writes is fenced by the lease epoch.
        self.leadership = Leadership(self.store.leases, ha)
        self.leadership.subscribe(self._leadership_changed)
        fenced = FencedBackend(self.backend, self.leadership)
        # Supervision in three parts, wired here and nowhere else: the queue cache polls Slurm and
        # hands each snapshot to the reconciler, which (on the leader only) writes the store,
        # publishes into the journal and lets the restarter act; checkpoint progress is read by its
        # own task, off the poll path. Every replica polls: its API validates and shows from it.
        self.poller = QueueCache(
            self.backend, interval=config.poll_interval_seconds, default_partition=config.slurm.default_partition
        )
        sup = config.supervisor
        self.progress = ProgressReader(
            ProgressBudget(
                seconds=sup.progress_read_seconds,
                max_keys=sup.progress_max_keys,
                interval=sup.progress_interval_seconds,
                retry_after=sup.progress_retry_seconds,
                workers=sup.progress_workers,
            )
        )
        self.liveness = LivenessTable()
        # Goodput: node failures the restarter decides on feed the checkpoint interval autopilot.
        self.autopilot = Autopilot(FailureHistory(config.goodput, boot=self._slurmd_started), config.goodput)
        self.goodput = GoodputReporter(self.liveness, self.autopilot)
        self.restarter = Restarter(
            fenced,
            self.store.jobs,
            self.journal,
            self.progress,
            config.restart,
            self.liveness,
            failures=self.autopilot.history,
        )
        self.reconciler = Reconciler(
            self.store.jobs,
            self.journal,
            self.restarter,
            self.progress,
            kick=self.poller.kick,
            hurry=self.poller.hurry,
            want_whole=self.poller.want_whole,
            may_act=lambda: self.leadership.is_leader,
        )
        self.poller.subscribe(self.reconciler)
        self.poller.focus_on(self.reconciler.focus)
        # Liveness: heartbeats from the jobs' ranks, a detector that decides in seconds what Slurm
        # would see after SlurmdTimeout, acted on by the reconciler's restarter.
        live = config.liveness
        self.heartbeats = HeartbeatService(
            self.store.jobs,
            self.liveness,
            live,
            self.reconciler.on_first_step,
            jobs=self._job_view,
            hurry=lambda: self.poller.hurry(_BEAT_HURRY_SECONDS),
            leading=lambda: self.leadership.is_leader,
            autopilot=self.autopilot,
        )
        self.prober = SlurmdProber(live.probe_timeout_seconds)
        self.detector = Detector(
            self.liveness,
            self.prober,
            self.reconciler.on_detected,
            jobs=self._job_view,
            nodes=lambda: self.poller.snapshot.node_map,
            others_on=self._others_on,
            suspect_after_intervals=live.suspect_after_intervals,
            check_every=live.check_every_seconds,
            progress=ProgressRules(
                live.progress_hang_factor,
                live.progress_hang_floor_seconds,
                live.straggler_factor,
                live.straggler_window_steps,
            ),
            straggling=_count_stragglers,
            health=NodeHealth(
                window_seconds=live.health_window_seconds,
                jobs_to_drain=live.health_jobs_to_drain,
                event_seconds=live.health_event_seconds,
            ),
            # Through the restarter's fenced path: a deposed replica drains nothing.
            drain=functools.partial(self.restarter.node_out, drain=True) if live.drain_failing_nodes else None,
            evict=live.evict_stragglers,
        )
        # The operator's probe returns the nodes clusterd drained, as clusterd's own user (fenced too).
        slurm = config.slurm
        runner = CommandRunner(slurm.bin_dir, slurm.slurm_conf, slurm.command_timeout_seconds)
        self.health_probe = HealthProbe(
            self.detector.health,
            FencedMaintenance(CommandsMaintenance(runner), self.leadership),
            live.health_probe_command,
            nodes=lambda: self.poller.snapshot.node_map,
            user=service_user(),
            interval=live.health_probe_interval_seconds,
            timeout=live.health_probe_timeout_seconds,
            leading=lambda: self.leadership.is_leader,
        )
        self.placer = TopologyPlacer(self.poller)
        self.quotas = Quotas(self.store.jobs, config.limits)
        self.manager = JobManager(
            config,
            self.backend,
            self.store.jobs,
            self.poller,
            self.journal,
            self.placer,
            quotas=self.quotas,
            audit=self.audit,
        )
        # What users see beyond their records (logs, history, the queue, checkpoints): one facade
        # for the gRPC views and the web dashboard alike.
        self.checkpoints = CheckpointViews(self.manager, config.views)
        self.views = JobViews(
            self.manager,
            JobLogs(self.manager, self.store.jobs, self.bus, self.poller, config.views),
            History(self.store.jobs, self.backend, config.views, config.limits),
            self.checkpoints,
            self.poller,
            self.placer,
            config.views,
            goodput=self.goodput,
        )
        self.views.stragglers = self.liveness.stragglers
        self.tokens = TokenStore(config.tokens_file)
        self.limiter = RateLimiter(config.limits.requests_per_second, config.limits.burst)
        self.health = health.aio.HealthServicer() if hasattr(health, "aio") else health.HealthServicer()
        self._stop = asyncio.Event()
        self._server: grpc.aio.Server | None = None
        self.port: int = 0
        self._health_task: asyncio.Future[None] | None = None
        self._lead_task: asyncio.Future[None] | None = None
        self._poll_task: asyncio.Task[None] | None = None
        self._tokens_task: asyncio.Task[None] | None = None
        self._retention_task: asyncio.Task[None] | None = None
        self._progress_task: asyncio.Task[None] | None = None
        self._detector_task: asyncio.Task[None] | None = None
        self._probe_task: asyncio.Task[None] | None = None
        self._lease_task: asyncio.Task[None] | None = None
        self._journal_task: asyncio.Task[None] | None = None
        self._goodput_task: asyncio.Task[None] | None = None
        self._journal_stop = asyncio.Event()  # after the last submit drained: its events are logged too
        self._serving = False
        self._metrics: MetricsServer | None = None
        self._web: MetricsServer | None = None  # the dashboard's own listener, when not the metrics one

    def _job_view(self, job_id: str) -> JobView | None:
        snap = self.poller.snapshot
        sj = snap.jobs.get(job_id)
        if sj is None:
            return None
        known = [n.cpus_total if n is not None else 0 for n in map(snap.node_map.get, sj.nodes)]
        cpus = sum(known) if known and all(known) else 0  # 0: Slurm did not say for every node
        return JobView(sj.state, sj.restart_count, sj.nodes, sj.user, cpus, sj.array_job_id)

    def _others_on(self, node: str, user: str) -> bool:
        """Whether a running job of another user than ``user`` is on ``node`` (as of the last poll)."""
        return any(
            j.user != user and node in j.nodes and j.state == JobState.RUNNING
            for j in self.poller.snapshot.jobs.values()
        )

    @property
    def metrics_port(self) -> int | None:
        return self._metrics.port if self._metrics is not None else None

    @property
    def web_port(self) -> int | None:
        """The dashboard's port (the metrics port when it shares that listener); None when off."""
        if not self.config.web.enabled:
            return None
        server = self._web or self._metrics
        return server.port if server is not None else None

    async def start(self) -> None:
        await self.store.open()  # connects and migrates (store/migrate.py)
        await recall(self.detector.health, self.store.jobs)  # node health survives a restart
        await self._restore_failures()
        limit = self.config.limits.max_message_bytes
        server = grpc.aio.server(
            interceptors=[
                AuthInterceptor(
                    self.tokens,
                    cn_users=parse_cn_map(self.config.tls.cn_user_map),
                    limiter=self.limiter,
                )
            ],
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", limit),
            ],
        )
        servicer = ViewsJobServicer(self.manager, self.bus, self.heartbeats, self.journal, views=self.views)
        jobs_pb2_grpc.add_JobServiceServicer_to_server(servicer, server)
        cluster_pb2_grpc.add_ClusterServiceServicer_to_server(
            ClusterServicer(self.poller, self.placer, self.detector.health.summary), server
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection((*_SERVICES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
        if self._credentials is not None:
            self.port = server.add_secure_port(self.config.listen, self._credentials)
        else:
            self.port = server.add_insecure_port(self.config.listen)
        if self.port == 0:
            raise OSError(f"cannot listen on {self.config.listen}")
        if self._socket is not None:
            secure_socket(self._socket)
        await self._set_health(False)
        await self.journal.start()
        self._journal_task = asyncio.create_task(self.journal.run(self._journal_stop))
        await self.leadership.step()  # one replica alone leads from its first poll on
        self._lease_task = asyncio.create_task(self.leadership.run(self._stop))
        # First poll before serving, so validation knows the partitions and nodes.
        with contextlib.suppress(Exception):
            await self.poller.poll_once()
            await self._set_health(True)
            self.poller.set_health(True)
        self.poller.subscribe_health(self._health_changed)
        self._progress_task = asyncio.create_task(self.progress.run(self._stop))
        if self.config.liveness.enabled:
            self._detector_task = asyncio.create_task(self.detector.run(self._stop))
            if self.config.liveness.health_probe_command:
                self._probe_task = asyncio.create_task(self.health_probe.run(self._stop))
        try:
            features = await detect(self.config.slurm, self.backend)  # the release and what it offers
        except SlurmError as exc:
            log.warning(
                "Slurm's release and configuration unknown (%s): `list --all` shows each user their "
                "own jobs, and scripts' #PBS lines are read as the newest sbatch reads them, until a "
                "restart reads them",
                exc,
            )
        else:
            kind = getattr(self.backend, "name", type(self.backend).__name__)  # what "auto" chose, too
            SLURM_INFO.labels(version=features.version, backend=kind).set(1)
            log.info("Slurm %s via the %s backend: %s", features.version, kind, "; ".join(features.describe()))
            self.views.slurm_private_jobs = "jobs" in features.private_data
            if features.release is not None:  # scripts' #PBS lines are read as this release's sbatch reads them
                self.poller.slurm_release = features.release.release
        await self._start_http()
        await server.start()
        self._server = server
        self._tokens_task = asyncio.create_task(self.tokens.watch(self._stop, self.config.tokens_reload_seconds))
        mode = "plaintext" if self._credentials is None else ("mTLS" if self.config.tls.client_ca_file else "TLS")
        if self._socket is not None:
            group = self.config.socket_group
            mode = f"unix socket, group {group}" if group else "unix socket, owner only"
        log.info("clusterd listening on %s (%s)", self.config.listen, mode)

    async def _start_http(self) -> None:
        """/metrics, and the dashboard on its own listener or sharing the metrics one."""
        cfg = self.config
        web = WebApp(cfg, self.views, self.tokens, self.limiter) if cfg.web.enabled else None
        scheme = "https" if cfg.tls.cert_file and web is not None else "http"
        same = cfg.web.listen == cfg.metrics_listen and not cfg.web.listen.endswith(":0")  # two ":0" are two ports
        shared = web is not None and (not cfg.web.listen or same)
        if cfg.metrics_listen:
            if shared:
                self._metrics = await serve(cfg.metrics_listen, combined(web, self.role), config=cfg)
                log.info(
                    "metrics on %s://%s/metrics, dashboard on %s://%s/",
                    scheme,
                    cfg.metrics_listen,
                    scheme,
                    cfg.metrics_listen,
                )
            else:
                self._metrics = await serve(cfg.metrics_listen, combined(None, self.role), config=cfg, dashboard=False)
                log.info("metrics on http://%s/metrics, health on /healthz", cfg.metrics_listen)
        if web is not None and not shared:
            self._web = await serve(cfg.web.listen, combined(web, metrics=False), config=cfg)
            log.info("dashboard on %s://%s/", scheme, cfg.web.listen)

    def _health_changed(self, ok: bool) -> None:
        self._health_task = asyncio.ensure_future(self._set_health(ok))

    def _slurmd_started(self, node: str) -> float:
        """When ``node``'s slurmd last started, by the last poll (0: not known): one death of a node
        is one failure, however many jobs it ended."""
        seen = self.poller.snapshot.node_map.get(node)
        return seen.slurmd_started if seen is not None else 0.0

    async def _restore_failures(self) -> None:
        """The autopilot's node failures, from the store: the ones this replica did not see itself
        (before it started, or while another replica led) count too."""
        try:
            retention = self.config.limits.finished_retention_seconds
            count = await restore_failures(self.autopilot.history, self.store.jobs, complete_seconds=retention)
        except Exception:  # the store unreachable: advice from what is known, restored on the next lead
            log.warning("goodput: node failures not read back from the store", exc_info=True)
        else:
            log.info("goodput: %d node failure records read back from the store", count)

    async def _lead(self, after: asyncio.Future[None] | None = None) -> None:
        """The old leader's node failures and drains become this replica's to act on. Leads run one
        after another (``after``: the previous one), so a lead regained while one still reads reads
        again after it, and sees what was stored before the gain (both reads are idempotent)."""
        if after is not None:
            await asyncio.wait((after,))  # its failure or cancellation is its own, logged there
        try:
            await recall(self.detector.health, self.store.jobs)
        except Exception:
            log.exception("node health: cannot recall the failures in the store")
        self.detector.lead()
        self.health_probe.lead()
        await self._restore_failures()

    def _leadership_changed(self, leading: bool) -> None:
        self.liveness.clear()  # beats start anew with the leadership: no stale silence to act on
        log.info("%s is now the %s", self.leadership.holder, "leader" if leading else "follower")
        if leading:
            self._lead_task = asyncio.ensure_future(self._lead(self._lead_task))
        self._health_task = asyncio.ensure_future(self._set_health(self._serving))

    def role(self) -> dict[str, object]:
        """What /healthz says: leader, follower, or not ready (not serving the API yet)."""
        role = ("leader" if self.leadership.is_leader else "follower") if self._serving else "not ready"
        return {"role": role, "replica": self.leadership.holder, "epoch": self.leadership.epoch}

    async def _set_health(self, ok: bool) -> None:
        self._serving = ok
        serving, not_serving = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
        status = serving if ok else not_serving
        leading = serving if ok and self.leadership.is_leader else not_serving
        for name, value in (("", status), *((n, status) for n in _SERVICES), (LEADER_HEALTH, leading)):
            result = self.health.set(name, value)
            if asyncio.iscoroutine(result):
                await result

    async def run(self) -> None:
        """Serve until SIGTERM/SIGINT, then stop accepting calls and drain within the grace period."""
        await self.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self._stop.set)
        self._poll_task = asyncio.create_task(self.poller.run(self._stop))
        self._retention_task = asyncio.create_task(self.quotas.run_retention(self._stop))
        self._goodput_task = asyncio.create_task(
            publish_goodput(
                self.store.jobs,
                self.goodput,
                self._stop,
                leading=lambda: self.leadership.is_leader,
                partitions=lambda: self.poller.snapshot.partitions,
            )
        )
        try:
            await self._stop.wait()
        finally:
            await self.stop()

    def request_stop(self) -> None:
        self._stop.set()

    async def stop(self) -> None:
        """Stop accepting calls, let the queue cache finish its round and submissions end, then close the store."""
        self._stop.set()
        self.bus.close_all()
        if self._server is not None:
            await self._server.stop(self.config.shutdown_grace_seconds)
            self._server = None
        await self.heartbeats.drain(self.config.shutdown_grace_seconds)  # while this replica still leads
        tasks = (
            self._poll_task,
            self._tokens_task,
            self._retention_task,
            self._progress_task,
            self._detector_task,
            self._probe_task,
            self._lease_task,
            self._goodput_task,
            self._lead_task,
        )
        for task in tasks:
            if task is not None:
                await task
        self._poll_task = self._tokens_task = self._retention_task = self._progress_task = None
        self._detector_task = self._probe_task = self._lease_task = self._goodput_task = self._lead_task = None
        await self.manager.drain(self.config.shutdown_grace_seconds)
        self._journal_stop.set()
        if self._journal_task is not None:
            await self._journal_task
            self._journal_task = None
        self.progress.close()
        self.prober.close()
        for http in (self._metrics, self._web):
            if http is not None:
                await http.stop()
        self._metrics = self._web = None
        self.checkpoints.close()
        close = getattr(self.backend, "aclose", None)
        if self._owns_backend and close is not None:
            await close()
        await self.store.close()
        await asyncio.to_thread(self.audit.close)


def service_user() -> str:
    """clusterd's own user: the only one its health probe's reservation admits."""
    return pwd.getpwuid(os.geteuid()).pw_name


def _count_stragglers(new: dict[str, float]) -> None:
    for node in new:
        STRAGGLERS.labels(node=node).inc()

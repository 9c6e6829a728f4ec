"""slurmrestd backend: Slurm's REST API over HTTP or a unix socket.

API versions: v0.0.38 (Slurm 22.05, verified against the local stack) and the data_parser versions
v0.0.40 ... v0.0.45 (23.11 ... 26.05, built from Slurm's documented parser tables): the configured
one, else the newest the server's ``GET /openapi/v3`` lists that we also know
(:mod:`clusterd.slurm.restd_versions` holds the per-version request shapes).

Authentication is JWT (``rest_auth/jwt``): with the cluster's HS256 key, clusterd signs a
short-lived token per user (claims ``sun``, ``iat``, ``exp``) so a job submitted for alice runs as
alice; calls not made on behalf of a user are signed for SlurmUser (root). With a fixed token file
instead, every call carries that token (a SlurmUser token may act for any user name it sends).

Responses of ``GET jobs``/``GET nodes`` have the shapes :mod:`clusterd.slurm.parse` reads for
every version. No version has a requeue or a topology endpoint: those two calls go to the
commands backend (see :meth:`RestdBackend.requeue`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import jwt

from clusterd import accounts
from clusterd.accounts import UnixAccount
from clusterd.config import SlurmConfig
from clusterd.errors import SlurmError, SlurmUnavailable, says_unavailable
from clusterd.observability.metrics import observed_slurm_call
from clusterd.slurm import parse
from clusterd.slurm.commands import CommandsBackend
from clusterd.slurm.request import JobRequest
from clusterd.slurm.restd_between import RETRY_SECONDS, Between, States, parse_states, state_query
from clusterd.slurm.restd_http import H11Client, HttpFailure, Reply, RestdHttp
from clusterd.slurm.restd_submit import Unexpressible
from clusterd.slurm.restd_versions import KNOWN_API_VERSIONS, RestApi, api_for, choose
from clusterd.slurm.types import JobPoll, SlurmJob, SlurmNode, SlurmSwitch

log = logging.getLogger(__name__)

BACKEND = "slurmrestd"
__all__ = ["KNOWN_API_VERSIONS", "RestdBackend"]
SLURM_USER = "root"  # SlurmUser of the clusters we run on: signs calls made for no particular user
# Past this many jobs a changed queue costs more as one GET jobs than as two filtered squeues (256
# nodes, 10,000 held jobs on the loaded 2-core test host: a change seen 14-29 s late through GET
# jobs; bench/scale.py).
_WHOLE_REPLY_MAX_JOBS = 2000
_VERSION_PATH_RE = re.compile(r"^/slurm/(v[0-9]+\.[0-9]+\.[0-9]+)/")


def _error_text(data: Any) -> str:
    """Slurm's errors array as one line: each entry's description (when given) and error."""
    if not isinstance(data, dict):
        return ""
    parts = []
    for err in data.get("errors") or []:
        if not isinstance(err, dict):
            parts.append(str(err))
            continue
        desc = str(err.get("description") or "").strip()
        text = str(err.get("error") or "").strip()
        parts.append(f"{desc} ({text})" if desc and text and desc != text else desc or text)
    return "; ".join(p for p in parts if p)


def _error(command: str, status: int | None, text: str, *, unavailable: bool = False) -> SlurmError:
    """SlurmError (or SlurmUnavailable) whose message names the HTTP status, not an exit code."""
    cls = SlurmUnavailable if unavailable else SlurmError
    exc = cls(command, status if status is not None else 0, text)
    where = f"HTTP {status}" if status is not None else ("no answer" if unavailable else "not sent")
    exc.args = (f"{command} failed ({where}): {exc.detail}",)
    return exc


def _check_job_id(command: str, job_id: str) -> str:
    """Job ids go into URL paths: digits (or one array task, digits_digits), so nothing can reach
    another endpoint."""
    if not job_id.replace("_", "", 1).isdigit() or job_id.startswith("_") or job_id.endswith("_"):
        raise _error(command, None, f"invalid job id {job_id!r}: expected N or N_TASK")
    return job_id


class RestdBackend:
    """:class:`~clusterd.slurm.base.SlurmBackend` over slurmrestd (``restd_url`` in the config)."""

    name = BACKEND

    def __init__(
        self,
        config: SlurmConfig,
        *,
        client: RestdHttp | None = None,
        fallback: CommandsBackend | None = None,
    ) -> None:
        if not config.restd_url:
            raise _error(BACKEND, None, "slurm.restd_url is not set")
        if not (config.jwt_key_file or config.jwt_token_file):
            raise _error(BACKEND, None, "slurmrestd needs slurm.jwt_key_file or slurm.jwt_token_file")
        self._config = config
        self._client = client or _make_client(
            config.restd_url, config.command_timeout_seconds, ca_file=config.restd_ca_file
        )
        self._owns_client = client is None
        self._fallback = fallback
        self._api = config.restd_api_version
        self._api_lock = asyncio.Lock()
        self._key: bytes | None = None
        self._tokens: dict[str, tuple[str, float]] = {}  # user -> (token, monotonic refresh time)
        self._jobs_stamp = 0  # Slurm's last_update in the last whole GET jobs (0: none)
        self._whole_jobs: list[SlurmJob] | None = None  # that reply's jobs
        self._nodes_stamp = 0  # the same for GET nodes, whose last answer list_nodes keeps
        self._queue_size = 0  # jobs in the last whole read (see poll_jobs)
        self._nodes: list[SlurmNode] = []
        self._stamp_refused: set[str] = set()  # "jobs"/"nodes": slurmrestd failed a stamped read there
        self._between = Between()  # the last partial look of a big queue (see poll_jobs)
        self._states_refused_until = 0.0  # monotonic; GET jobs/state failed: no state reads until then

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    # ------------------------------------------------------------------ authentication
    def _token_for(self, user: str) -> str:
        """A JWT for ``user``: signed here (reused for half its lifetime) or the configured token."""
        cfg = self._config
        if not cfg.jwt_key_file:
            return Path(cfg.jwt_token_file).read_text().strip()
        cached = self._tokens.get(user)
        now = time.monotonic()
        if cached and now < cached[1]:
            return cached[0]
        if self._key is None:
            self._key = Path(cfg.jwt_key_file).read_bytes()
        lifetime = max(int(cfg.jwt_lifetime_seconds), 30)
        issued = int(time.time())
        token = jwt.encode({"sun": user, "iat": issued, "exp": issued + lifetime}, self._key, algorithm="HS256")
        self._tokens[user] = (token, now + lifetime / 2)
        return token

    def _headers(self, user: str) -> dict[str, str]:
        return {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": self._token_for(user)}

    # ------------------------------------------------------------------ HTTP
    async def _send(
        self, method: str, path: str, command: str, *, user: str = SLURM_USER, body: dict[str, Any] | None = None
    ) -> Reply:
        """One request; transport failures are SlurmUnavailable, HTTP errors SlurmError (Slurm's words)."""
        try:
            headers = self._headers(user)
        except (OSError, jwt.PyJWTError) as exc:
            raise _error(command, None, f"cannot make a JWT for {user!r}: {exc}") from exc
        try:
            resp = await self._client.request(method, path, headers=headers, body=body)
        except HttpFailure as exc:
            text = f"slurmrestd at {self._config.restd_url}: {exc}"
            if exc.timeout:
                raise SlurmUnavailable(command, None, text) from exc
            raise _error(command, None, text, unavailable=True) from exc
        if resp.status >= 400:
            try:
                detail = _error_text(resp.json())
            except ValueError:
                detail = ""
            detail = detail or resp.text.strip()[:300] or resp.reason
            unavailable = resp.status in (502, 503, 504) or says_unavailable(detail)
            raise _error(command, resp.status, detail, unavailable=unavailable)
        return resp

    async def _api_version(self) -> str:
        """The configured version, or the newest known one the server lists in its OpenAPI spec."""
        if self._api:
            if self._api not in KNOWN_API_VERSIONS:
                raise _error(BACKEND, None, f"restd_api_version {self._api!r} unknown (known: {KNOWN_API_VERSIONS})")
            return self._api
        async with self._api_lock:
            if not self._api:
                offered = await self.offered_versions()
                chosen = choose(offered)
                if chosen is None:
                    text = (
                        f"slurmrestd offers API versions {sorted(offered) or 'none'}; "
                        f"clusterd speaks {list(KNOWN_API_VERSIONS)}: set slurm.restd_api_version "
                        "or use the commands backend"
                    )
                    raise _error("GET openapi", 200, text)
                log.info("slurmrestd API %s chosen (server offers %s)", chosen, sorted(offered))
                self._api = chosen
        return self._api

    async def offered_versions(self) -> set[str]:
        """The API versions the server's ``GET /openapi/v3`` lists (``{"v0.0.42", ...}``).

        Each release serves its newest data_parser version and the two or three before it (24.11:
        v0.0.40-42; 26.05: v0.0.42-45); ``clusterd check`` and the compatibility suite read this.
        """
        with _observed("GET openapi"):
            resp = await self._send("GET", "/openapi/v3", "GET openapi")
            paths = _json(resp, "GET openapi").get("paths") or {}
            return {m.group(1) for p in paths if (m := _VERSION_PATH_RE.match(str(p)))}

    async def api_version(self) -> str:
        """The API version this backend speaks (configured, else chosen from what the server offers)."""
        return await self._api_version()

    async def _spec(self) -> RestApi:
        return api_for(await self._api_version())

    async def _path(self, tail: str) -> str:
        return f"/slurm/{await self._api_version()}/{tail}"

    def _commands(self) -> CommandsBackend:
        if self._fallback is None:
            self._fallback = CommandsBackend(self._config)
        return self._fallback

    # ------------------------------------------------------------------ SlurmBackend
    async def submit(self, request: JobRequest) -> str:
        """POST job/submit signed for the job's user: slurmctld sees the caller, not clusterd.

        A request this API version cannot carry (:class:`Unexpressible`) goes to sbatch, run as
        the caller by the commands backend: the same job, one process more.
        """
        command = "POST job/submit"
        account = await self._account(request.user)
        api = await self._spec()
        switches = request.switches.render() if api.defers_switches and request.switches else None
        # The PATH jobs start with is slurm.job_path, as with sbatch (CommandsBackend): the service's
        # own PATH may not exist where jobs run (seen on a chroot's nodes: no job venv on it).
        path = self._config.job_path or os.environ.get("PATH", "/usr/bin:/bin")
        base = {"PATH": path, "LANG": "C.UTF-8", "HOME": account.home, "LOGNAME": account.name}
        try:
            body = api.submit_body(replace(request, user=account.name), base)
        except Unexpressible as exc:  # before the POST is observed: no call to slurmrestd is counted
            log.info("submitting with sbatch: %s", exc.detail)
            return await self._commands().submit(request)
        with _observed(command):
            resp = await self._send("POST", await self._path("job/submit"), command, user=account.name, body=body)
            data = _json(resp, command)
            job_id = data.get("job_id")
            # A held job comes back with a job id AND an informational "errors" entry.
            if not (isinstance(job_id, int) and not isinstance(job_id, bool) and job_id > 0):
                text = _error_text(data) or f"no job id in the answer: {resp.text[:200]!r}"
                raise _error(command, resp.status, text, unavailable=says_unavailable(text))
        if switches is not None:
            await self._set_switches(str(job_id), switches)
        return str(job_id)

    async def _account(self, user: str) -> UnixAccount:
        """The job's user's account, for the HOME and LOGNAME a job starts with: clusterd.accounts
        keeps it (the manager has just looked it up), so a submit storm pays no thread hop for it."""
        account = accounts.cached(user) if user else None
        return account if account is not None else await asyncio.to_thread(_account_of, user)

    async def _set_switches(self, job_id: str, switches: str) -> None:
        """``scontrol update Switches=`` (v0.0.38 disables the field); a job already running keeps its nodes."""
        try:
            await self._commands().runner.run(["scontrol", "update", f"jobid={job_id}", f"Switches={switches}"])
        except SlurmError as exc:
            log.info("job %s: switch constraint not applied (%s); Slurm's best fit placed it", job_id, exc.detail)

    async def cancel(self, job_id: str) -> None:
        command = "DELETE job"
        with self._between.changing(), _observed(command):
            path = await self._path(f"job/{_check_job_id(command, job_id)}")
            _check_errors(await self._send("DELETE", path, command), command)

    async def requeue(self, job_id: str) -> None:
        """No slurmrestd version has a requeue endpoint: ``scontrol requeue`` through the commands backend."""
        command = "scontrol requeue"
        with self._between.changing(), _observed(command):
            await self._commands().requeue(_check_job_id(command, job_id))

    async def steps_on(self, job_id: str, on_nodes: tuple[str, ...]) -> tuple[str, ...]:
        """Steps are listed and signalled through the commands backend (one endpoint per version is not worth it)."""
        command = "squeue steps"
        with _observed(command):
            return await self._commands().steps_on(_check_job_id(command, job_id), on_nodes)

    async def kill_steps(self, job_id: str, steps: tuple[str, ...] | None = None) -> None:
        command = "scancel steps"
        with _observed(command):
            await self._commands().kill_steps(_check_job_id(command, job_id), steps)

    async def set_node_down(self, node: str, reason: str) -> None:
        command = "scontrol update node"
        with _observed(command):
            await self._commands().set_node_down(node, reason)

    async def drain_node(self, node: str, reason: str) -> None:
        with _observed("scontrol update node"):
            await self._commands().drain_node(node, reason)

    async def update_job(
        self, job_id: str, *, exclude_nodes: tuple[str, ...] | None = None, start_after: int | None = None
    ) -> None:
        """POST job/{id}: excluded nodes (() clears the list) and the begin time (now / now+N)."""
        command = "POST job"
        if exclude_nodes is None and start_after is None:
            return
        with self._between.changing(), _observed(command):
            path = await self._path(f"job/{_check_job_id(command, job_id)}")
            body = (await self._spec()).update_body(exclude_nodes=exclude_nodes, start_after=start_after)
            _check_errors(await self._send("POST", path, command, body=body), command)

    async def list_jobs(self) -> list[SlurmJob]:
        """``GET jobs?update_time=`` with the stamp of the last whole reply (23.11 on): that reply's
        jobs again when Slurm says no job changed since (a big queue's periodic whole read then
        costs one small request), else the whole queue."""
        whole = await self._whole_since(self._whole_jobs is not None)
        self._between.forget()  # the cache's snapshot is this read now, whatever a look said before
        return list(whole if whole is not None else self._whole_jobs or ())

    async def poll_jobs(self, focus: frozenset[str]) -> JobPoll:
        """``GET jobs?update_time=`` with Slurm's stamp of the last reply (23.11 on): nothing when no
        job changed since (an empty reply, or 304 on 26.05), else the whole queue (``GET jobs`` has no
        state or id filter).

        On a queue past ``_WHOLE_REPLY_MAX_JOBS`` jobs, where squeue filters (24.11 on), the commands
        backend's partial look instead: every change would cost the whole queue's JSON here (10,000
        jobs: 31 MB, seconds of slurmrestd's and clusterd's time), two filtered squeues cost what changed.
        Between two such looks, the followed jobs' states (:mod:`clusterd.slurm.restd_between`).
        """
        if self._queue_size > _WHOLE_REPLY_MAX_JOBS and await self._commands().filters_queue():
            mark = self._between.mark()
            states = await self._focus_states(focus)
            standing = self._between.standing(focus, states)
            if standing is not None:
                return standing
            with _observed("squeue"):
                queue = await self._queue_states() if states is not None else None
                standing = self._between.renewed(focus, states, queue)
                if standing is not None:
                    return standing
                poll = await self._commands().poll_jobs(focus)
            self._between.remember(poll, focus, states, queue, mark)
            return poll
        jobs = await self._whole_since(True)
        return JobPoll((), whole=False, unchanged=True) if jobs is None else JobPoll(tuple(jobs))

    async def _whole_since(self, stamped: bool) -> list[SlurmJob] | None:
        """``GET jobs``, with ``?update_time=`` the last whole reply's stamp when ``stamped``: the
        whole queue, or None when Slurm says no job changed since (an empty reply; 304 on 26.05)."""
        command = "GET jobs"
        with _observed(command):
            resp, since = await self._get_since("jobs", self._jobs_stamp if stamped else 0, command)
            if since and resp.status == 304:
                return None
            try:
                jobs, stamp = await asyncio.to_thread(parse.parse_jobs_since, resp.text, asked_since=since)
            except ValueError as exc:
                raise _error(command, 200, str(exc)) from exc
        if jobs is None:
            return None
        self._between.forget()  # a look older than this reply must not stand after it
        self._jobs_stamp = 0 if "jobs" in self._stamp_refused else stamp
        self._whole_jobs = jobs
        self._queue_size = len(jobs)
        return jobs

    async def _queue_states(self) -> str | None:
        """The queue's job states (an economy, like ``_focus_states``); None when squeue failed: the
        filtered look that follows says whether Slurm answers."""
        try:
            return await self._commands().queue_states()
        except SlurmError as exc:
            log.warning("squeue --only-job-state failed (%s): a filtered look instead", exc)
            return None

    async def _focus_states(self, focus: frozenset[str]) -> States | None:
        """``GET jobs/state`` of the followed jobs; None where it cannot be asked or failed (the
        poll then looks with squeue, which needs no slurmrestd): for good where the API has no such
        endpoint, for ``RETRY_SECONDS`` after any other failure."""
        query = state_query(focus)
        if query is None or time.monotonic() < self._states_refused_until:
            return None
        if not query:
            return ()
        command = "GET jobs/state"
        with _observed(command):
            try:
                resp = await self._send("GET", f"{await self._path('jobs/state/')}?{query}", command)
                return parse_states(_check_errors(resp, command))
            except (SlurmError, ValueError) as exc:
                missing = isinstance(exc, SlurmError) and exc.returncode in (400, 404, 405, 422)
                self._states_refused_until = float("inf") if missing else time.monotonic() + RETRY_SECONDS
                how = "from now on" if missing else f"for {RETRY_SECONDS:g}s"
                log.warning("%s; a filtered look at every poll %s", exc, how)
                return None

    async def list_nodes(self) -> list[SlurmNode]:
        """``GET nodes?update_time=`` with the last reply's stamp (23.11 on): the last answer again
        when no node changed (304 on 26.05), else every node."""
        command = "GET nodes"
        with _observed(command):
            resp, since = await self._get_since("nodes", self._nodes_stamp, command)
            if since and resp.status == 304:
                return list(self._nodes)
            try:
                nodes, stamp = await asyncio.to_thread(parse.parse_nodes_since, resp.text, asked_since=since)
            except ValueError as exc:
                raise _error(command, 200, str(exc)) from exc
        if nodes is None:
            return list(self._nodes)
        self._nodes, self._nodes_stamp = nodes, 0 if "nodes" in self._stamp_refused else stamp
        return list(nodes)

    async def _get_since(self, tail: str, since: int, command: str) -> tuple[Reply, bool]:
        """``GET tail``, with ``?update_time=since`` when ``since`` is a stamp and the server takes
        stamps; (the reply, whether it was asked with one)."""
        path = await self._path(tail)
        if not since or tail in self._stamp_refused:
            return await self._send("GET", path, command), False
        try:
            return await self._send("GET", f"{path}?update_time={since}", command), True
        except SlurmError as exc:
            if exc.returncode == 422:
                # Some releases' parsers refuse the stamp they gave ("Parsing of N for timestamp
                # failed", 24.11's v0.0.40/41): whole reads of both from then on.
                log.warning("slurmrestd refuses update_time (%s): polls read the whole queue and node list", exc.detail)
                self._stamp_refused |= {"jobs", "nodes"}
                return await self._send("GET", path, command), False
            if exc.returncode != 500:
                raise
            # 24.11's v0.0.42 answers a node read with nothing changed since the stamp with 500
            # ("Unable to query partitions"): a whole read that works means the stamp is at fault.
            reply = await self._send("GET", path, command)
            log.warning(
                "slurmrestd fails GET %s with update_time (%s): whole reads of it from now on", tail, exc.detail
            )
            self._stamp_refused.add(tail)
            return reply, False

    async def hold(self, job_id: str, *, user: str) -> None:
        """``scontrol uhold`` through the commands backend: a REST hold signed for root would be an
        admin hold, which the job's user could not release."""
        with self._between.changing(), _observed("scontrol uhold"):
            await self._commands().hold(_check_job_id("scontrol uhold", job_id), user=user)

    async def release(self, job_id: str, *, user: str) -> None:
        with self._between.changing(), _observed("scontrol release"):
            await self._commands().release(_check_job_id("scontrol release", job_id), user=user)

    async def mark_supervised(self, job_id: str, comment: str) -> None:
        """``scontrol update Comment= Requeue=1`` through the commands backend (one verified path)."""
        with self._between.changing(), _observed("scontrol update"):
            await self._commands().mark_supervised(_check_job_id("scontrol update", job_id), comment)

    async def set_admin_comment(self, job_id: str, note: str) -> None:
        with self._between.changing(), _observed("scontrol update"):
            await self._commands().set_admin_comment(_check_job_id("scontrol update", job_id), note)

    async def accounting_jobs(self, *, since: float, until: float, user: str | None) -> list[SlurmJob] | None:
        """``sacct --json`` through the commands backend: slurmrestd serves /slurmdb/ only when its
        own slurmdbd plugin is loaded, while sacct reaches slurmdbd wherever the cluster has one."""
        with _observed("sacct"):
            return await self._commands().accounting_jobs(since=since, until=until, user=user)

    async def topology(self) -> list[SlurmSwitch]:
        """No REST topology endpoint exists: ``scontrol show topology`` through the commands backend."""
        with _observed("scontrol show topology"):
            return await self._commands().topology()

    async def partitions(self) -> list[str]:
        command = "GET partitions"
        with _observed(command):
            data = _check_errors(await self._send("GET", await self._path("partitions"), command), command)
            return [str(p["name"]) for p in data.get("partitions") or [] if isinstance(p, dict) and p.get("name")]

    async def version(self) -> str:
        """Slurm's release (e.g. ``22.05.8``) from the ``meta`` block of ``GET ping``.

        v0.0.38 names the block ``Slurm`` with numbers; data_parser versions ``slurm`` with strings.
        """
        command = "GET ping"
        with _observed(command):
            data = _check_errors(await self._send("GET", await self._path("ping"), command), command)
            meta = data.get("meta") or {}
            slurm = meta.get("Slurm") or meta.get("slurm") or {}
            release = slurm.get("release")
            if not release:
                v = slurm.get("version") or {}
                if "major" not in v:
                    raise _error(command, 200, "no Slurm version in the answer's meta block")
                release = f"{v['major']}.{int(v.get('minor', 0)):02d}.{v.get('micro', 0)}"
            return str(release)


def _make_client(url: str, timeout: float, *, ca_file: str = "") -> H11Client:
    """The HTTP client for ``slurm.restd_url`` (see :class:`H11Client`); a bad URL is a SlurmError."""
    try:
        return H11Client(url, timeout, ca_file=ca_file)
    except ValueError as exc:
        raise _error(BACKEND, None, str(exc)) from exc


def _account_of(user: str) -> UnixAccount:
    """The job's user's account (clusterd's own when none is named); blocking on a miss."""
    try:
        return accounts.lookup(user or pwd.getpwuid(os.geteuid()).pw_name)
    except KeyError:
        raise _error("POST job/submit", None, f"user {user!r} has no Unix account on this host") from None


def _json(resp: Reply, command: str) -> dict[str, Any]:
    try:
        data = resp.json()
    except ValueError as exc:
        raise _error(command, resp.status, f"not JSON: {resp.text[:200]!r}") from exc
    if not isinstance(data, dict):
        raise _error(command, resp.status, "expected a JSON object")
    return data


def _check_errors(resp: Reply, command: str) -> dict[str, Any]:
    data = _json(resp, command)
    text = _error_text(data)
    if text:
        raise _error(command, resp.status, text, unavailable=says_unavailable(text))
    return data


def _observed(command: str) -> contextlib.AbstractContextManager[None]:
    return observed_slurm_call(BACKEND, command, read=command.startswith("GET "))

"""Pure parser of Slurm accounting's JSON (``sacct --json``, slurmrestd ``GET /slurmdb/.../jobs``).

Two shapes, told apart by the values themselves, as in :mod:`clusterd.slurm.parse`:

* Slurm 22.05 (``dbv0.0.38``): ``state.current`` a string, ``exit_code.return_code`` a plain
  number, ``exit_code.signal.signal_id``, ``time.{start,end,submission,elapsed}`` plain numbers.
* Slurm 23.02+ (``data_parser``): ``state.current`` a list, numbers possibly wrapped in
  ``{"set", "infinite", "number"}``, ``exit_code.signal.id``.

Each job's batch record is what matters here (its steps are ignored); jobs that have not ended
(accounting lists running ones too) are dropped, since history is about finished jobs.
"""

from __future__ import annotations

import json
from typing import Any

from clusterd.slurm.parse import SlurmParseError, expand_nodes, job_state, reason_text
from clusterd.slurm.parse import _number as number
from clusterd.slurm.types import SlurmJob

# What sacct says (exit 1) when the cluster keeps no accounting: history then comes from the store alone.
ACCOUNTING_DISABLED = "accounting storage is disabled"


def _exit(raw: Any) -> tuple[int, int]:
    if not isinstance(raw, dict):
        return number(raw) or 0, 0
    code = number(raw.get("return_code")) or 0
    signal = raw.get("signal")
    sig = None
    if isinstance(signal, dict):
        sig = number(signal.get("id")) if "id" in signal else number(signal.get("signal_id"))
    return code, sig or 0


def _time(block: Any, key: str) -> float | None:
    value = number(block.get(key)) if isinstance(block, dict) else None
    return float(value) if value else None


def _job(j: dict[str, Any]) -> SlurmJob:
    state = j.get("state")
    current = state.get("current") if isinstance(state, dict) else state
    reason = state.get("reason") if isinstance(state, dict) else ""
    code, sig = _exit(j.get("exit_code"))
    times = j.get("time") or {}
    raw_array = j.get("array")
    array: dict[str, Any] = raw_array if isinstance(raw_array, dict) else {}
    array_id = number(array.get("job_id")) or 0
    task = number(array.get("task_id")) if array_id else None
    user = j.get("user")
    return SlurmJob(
        job_id=str(number(j["job_id"]) or j["job_id"]),
        name=str(j.get("name") or ""),
        user=str(user.get("name") if isinstance(user, dict) else user or ""),
        state=job_state(current),
        reason=reason_text(reason),
        nodes=expand_nodes(j.get("nodes") if j.get("nodes") not in ("None assigned",) else ""),
        partition=str(j.get("partition") or ""),
        exit_code=code,
        exit_signal=sig,
        submit_time=_time(times, "submission"),
        start_time=_time(times, "start"),
        end_time=_time(times, "end"),
        restart_count=number(j.get("restart_cnt")) or 0,
        array_job_id=str(array_id) if array_id else "",
        array_task_id=task,
    )


def parse_sacct(text: str) -> list[SlurmJob]:
    """The finished jobs of a ``sacct --json`` answer, any version. Raises SlurmParseError."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmParseError(f"sacct --json: not JSON: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("jobs", []), list):
        raise SlurmParseError("sacct --json: expected an object with a 'jobs' list")
    try:
        jobs = [_job(j) for j in data.get("jobs") or []]
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise SlurmParseError(f"sacct --json: malformed job record: {exc!r}") from exc
    return [j for j in jobs if j.state.terminal]

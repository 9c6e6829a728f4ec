import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from clusterctl.v1 import cluster_pb2 as _cluster_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TerminationCause(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TERMINATION_CAUSE_UNSPECIFIED: _ClassVar[TerminationCause]
    TERMINATION_CAUSE_NODE_FAILURE: _ClassVar[TerminationCause]
    TERMINATION_CAUSE_PREEMPTED: _ClassVar[TerminationCause]
    TERMINATION_CAUSE_TIME_LIMIT: _ClassVar[TerminationCause]
    TERMINATION_CAUSE_EXIT_CODE: _ClassVar[TerminationCause]
    TERMINATION_CAUSE_OUT_OF_MEMORY: _ClassVar[TerminationCause]
    TERMINATION_CAUSE_CANCELLED: _ClassVar[TerminationCause]
    TERMINATION_CAUSE_COMPLETED: _ClassVar[TerminationCause]
    TERMINATION_CAUSE_MANUAL_REQUEUE: _ClassVar[TerminationCause]
    TERMINATION_CAUSE_NO_PROGRESS: _ClassVar[TerminationCause]
    TERMINATION_CAUSE_RESTARTS_EXHAUSTED: _ClassVar[TerminationCause]
    TERMINATION_CAUSE_REQUEUE_REQUESTED: _ClassVar[TerminationCause]
    TERMINATION_CAUSE_RANK_HUNG: _ClassVar[TerminationCause]
    TERMINATION_CAUSE_RANK_FAILED: _ClassVar[TerminationCause]
    TERMINATION_CAUSE_STRAGGLER: _ClassVar[TerminationCause]

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_PENDING: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_SUSPENDED: _ClassVar[JobState]
    JOB_STATE_COMPLETING: _ClassVar[JobState]
    JOB_STATE_COMPLETED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]
    JOB_STATE_TIMEOUT: _ClassVar[JobState]
    JOB_STATE_NODE_FAIL: _ClassVar[JobState]
    JOB_STATE_PREEMPTED: _ClassVar[JobState]
    JOB_STATE_OUT_OF_MEMORY: _ClassVar[JobState]
    JOB_STATE_REQUEUED: _ClassVar[JobState]
    JOB_STATE_BOOT_FAIL: _ClassVar[JobState]
    JOB_STATE_DEADLINE: _ClassVar[JobState]
    JOB_STATE_UNKNOWN: _ClassVar[JobState]

class JobEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_EVENT_TYPE_UNSPECIFIED: _ClassVar[JobEventType]
    JOB_EVENT_TYPE_SNAPSHOT: _ClassVar[JobEventType]
    JOB_EVENT_TYPE_SUBMITTED: _ClassVar[JobEventType]
    JOB_EVENT_TYPE_STATE_CHANGED: _ClassVar[JobEventType]
    JOB_EVENT_TYPE_RESTARTED: _ClassVar[JobEventType]
    JOB_EVENT_TYPE_FINISHED: _ClassVar[JobEventType]
    JOB_EVENT_TYPE_CHECKPOINT: _ClassVar[JobEventType]

class LogStream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOG_STREAM_UNSPECIFIED: _ClassVar[LogStream]
    LOG_STREAM_STDOUT: _ClassVar[LogStream]
    LOG_STREAM_STDERR: _ClassVar[LogStream]
TERMINATION_CAUSE_UNSPECIFIED: TerminationCause
TERMINATION_CAUSE_NODE_FAILURE: TerminationCause
TERMINATION_CAUSE_PREEMPTED: TerminationCause
TERMINATION_CAUSE_TIME_LIMIT: TerminationCause
TERMINATION_CAUSE_EXIT_CODE: TerminationCause
TERMINATION_CAUSE_OUT_OF_MEMORY: TerminationCause
TERMINATION_CAUSE_CANCELLED: TerminationCause
TERMINATION_CAUSE_COMPLETED: TerminationCause
TERMINATION_CAUSE_MANUAL_REQUEUE: TerminationCause
TERMINATION_CAUSE_NO_PROGRESS: TerminationCause
TERMINATION_CAUSE_RESTARTS_EXHAUSTED: TerminationCause
TERMINATION_CAUSE_REQUEUE_REQUESTED: TerminationCause
TERMINATION_CAUSE_RANK_HUNG: TerminationCause
TERMINATION_CAUSE_RANK_FAILED: TerminationCause
TERMINATION_CAUSE_STRAGGLER: TerminationCause
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_PENDING: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_SUSPENDED: JobState
JOB_STATE_COMPLETING: JobState
JOB_STATE_COMPLETED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState
JOB_STATE_TIMEOUT: JobState
JOB_STATE_NODE_FAIL: JobState
JOB_STATE_PREEMPTED: JobState
JOB_STATE_OUT_OF_MEMORY: JobState
JOB_STATE_REQUEUED: JobState
JOB_STATE_BOOT_FAIL: JobState
JOB_STATE_DEADLINE: JobState
JOB_STATE_UNKNOWN: JobState
JOB_EVENT_TYPE_UNSPECIFIED: JobEventType
JOB_EVENT_TYPE_SNAPSHOT: JobEventType
JOB_EVENT_TYPE_SUBMITTED: JobEventType
JOB_EVENT_TYPE_STATE_CHANGED: JobEventType
JOB_EVENT_TYPE_RESTARTED: JobEventType
JOB_EVENT_TYPE_FINISHED: JobEventType
JOB_EVENT_TYPE_CHECKPOINT: JobEventType
LOG_STREAM_UNSPECIFIED: LogStream
LOG_STREAM_STDOUT: LogStream
LOG_STREAM_STDERR: LogStream

class RestartPolicy(_message.Message):
    __slots__ = ("max_restarts", "on_node_failure", "on_preemption", "on_time_limit", "retryable_exit_codes", "fatal_exit_codes", "backoff", "exclude_failed_nodes", "no_progress_limit", "signal_before_timeout_seconds", "heartbeat_interval", "hang_timeout", "on_rank_failure")
    MAX_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    ON_NODE_FAILURE_FIELD_NUMBER: _ClassVar[int]
    ON_PREEMPTION_FIELD_NUMBER: _ClassVar[int]
    ON_TIME_LIMIT_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_EXIT_CODES_FIELD_NUMBER: _ClassVar[int]
    FATAL_EXIT_CODES_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_FAILED_NODES_FIELD_NUMBER: _ClassVar[int]
    NO_PROGRESS_LIMIT_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_BEFORE_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    HANG_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    ON_RANK_FAILURE_FIELD_NUMBER: _ClassVar[int]
    max_restarts: int
    on_node_failure: bool
    on_preemption: bool
    on_time_limit: bool
    retryable_exit_codes: _containers.RepeatedScalarFieldContainer[int]
    fatal_exit_codes: _containers.RepeatedScalarFieldContainer[int]
    backoff: _duration_pb2.Duration
    exclude_failed_nodes: bool
    no_progress_limit: int
    signal_before_timeout_seconds: int
    heartbeat_interval: _duration_pb2.Duration
    hang_timeout: _duration_pb2.Duration
    on_rank_failure: bool
    def __init__(self, max_restarts: _Optional[int] = ..., on_node_failure: _Optional[bool] = ..., on_preemption: _Optional[bool] = ..., on_time_limit: _Optional[bool] = ..., retryable_exit_codes: _Optional[_Iterable[int]] = ..., fatal_exit_codes: _Optional[_Iterable[int]] = ..., backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., exclude_failed_nodes: _Optional[bool] = ..., no_progress_limit: _Optional[int] = ..., signal_before_timeout_seconds: _Optional[int] = ..., heartbeat_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., hang_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., on_rank_failure: _Optional[bool] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("name", "script", "command", "nodes", "tasks_per_node", "gpus_per_node", "cpus_per_task", "memory_mb_per_node", "time_limit", "partition", "account", "qos", "environment", "working_directory", "stdout_path", "stderr_path", "checkpoint_uri", "restart_policy", "placement", "request_id", "ntasks", "max_nodes", "gpus", "gpu_type", "memory_mb_per_cpu", "array", "dependency", "exclusive", "begin", "hold", "mail_type", "mail_user", "constraint", "reservation", "export", "submit_directory", "script_name", "nice", "sbatch_options", "checkpoint_tier", "spare_nodes")
    class EnvironmentEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    TASKS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    CPUS_PER_TASK_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    QOS_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    STDOUT_PATH_FIELD_NUMBER: _ClassVar[int]
    STDERR_PATH_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_URI_FIELD_NUMBER: _ClassVar[int]
    RESTART_POLICY_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    NTASKS_FIELD_NUMBER: _ClassVar[int]
    MAX_NODES_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_PER_CPU_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    EXCLUSIVE_FIELD_NUMBER: _ClassVar[int]
    BEGIN_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    MAIL_TYPE_FIELD_NUMBER: _ClassVar[int]
    MAIL_USER_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINT_FIELD_NUMBER: _ClassVar[int]
    RESERVATION_FIELD_NUMBER: _ClassVar[int]
    EXPORT_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_NAME_FIELD_NUMBER: _ClassVar[int]
    NICE_FIELD_NUMBER: _ClassVar[int]
    SBATCH_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_TIER_FIELD_NUMBER: _ClassVar[int]
    SPARE_NODES_FIELD_NUMBER: _ClassVar[int]
    name: str
    script: str
    command: _containers.RepeatedScalarFieldContainer[str]
    nodes: int
    tasks_per_node: int
    gpus_per_node: int
    cpus_per_task: int
    memory_mb_per_node: int
    time_limit: str
    partition: str
    account: str
    qos: str
    environment: _containers.ScalarMap[str, str]
    working_directory: str
    stdout_path: str
    stderr_path: str
    checkpoint_uri: str
    restart_policy: RestartPolicy
    placement: _cluster_pb2.PlacementPreference
    request_id: str
    ntasks: int
    max_nodes: int
    gpus: int
    gpu_type: str
    memory_mb_per_cpu: int
    array: str
    dependency: str
    exclusive: bool
    begin: str
    hold: bool
    mail_type: str
    mail_user: str
    constraint: str
    reservation: str
    export: str
    submit_directory: str
    script_name: str
    nice: int
    sbatch_options: _containers.RepeatedScalarFieldContainer[str]
    checkpoint_tier: str
    spare_nodes: int
    def __init__(self, name: _Optional[str] = ..., script: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., nodes: _Optional[int] = ..., tasks_per_node: _Optional[int] = ..., gpus_per_node: _Optional[int] = ..., cpus_per_task: _Optional[int] = ..., memory_mb_per_node: _Optional[int] = ..., time_limit: _Optional[str] = ..., partition: _Optional[str] = ..., account: _Optional[str] = ..., qos: _Optional[str] = ..., environment: _Optional[_Mapping[str, str]] = ..., working_directory: _Optional[str] = ..., stdout_path: _Optional[str] = ..., stderr_path: _Optional[str] = ..., checkpoint_uri: _Optional[str] = ..., restart_policy: _Optional[_Union[RestartPolicy, _Mapping]] = ..., placement: _Optional[_Union[_cluster_pb2.PlacementPreference, _Mapping]] = ..., request_id: _Optional[str] = ..., ntasks: _Optional[int] = ..., max_nodes: _Optional[int] = ..., gpus: _Optional[int] = ..., gpu_type: _Optional[str] = ..., memory_mb_per_cpu: _Optional[int] = ..., array: _Optional[str] = ..., dependency: _Optional[str] = ..., exclusive: _Optional[bool] = ..., begin: _Optional[str] = ..., hold: _Optional[bool] = ..., mail_type: _Optional[str] = ..., mail_user: _Optional[str] = ..., constraint: _Optional[str] = ..., reservation: _Optional[str] = ..., export: _Optional[str] = ..., submit_directory: _Optional[str] = ..., script_name: _Optional[str] = ..., nice: _Optional[int] = ..., sbatch_options: _Optional[_Iterable[str]] = ..., checkpoint_tier: _Optional[str] = ..., spare_nodes: _Optional[int] = ...) -> None: ...

class RestartRecord(_message.Message):
    __slots__ = ("cause", "failed_nodes", "time", "checkpoint_step", "exit_code", "detail", "nodes_before", "nodes_after", "detected_by", "failed_at", "detected_at", "requeued_at", "running_at", "first_step_at", "relaunched_at")
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    FAILED_NODES_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_STEP_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    NODES_BEFORE_FIELD_NUMBER: _ClassVar[int]
    NODES_AFTER_FIELD_NUMBER: _ClassVar[int]
    DETECTED_BY_FIELD_NUMBER: _ClassVar[int]
    FAILED_AT_FIELD_NUMBER: _ClassVar[int]
    DETECTED_AT_FIELD_NUMBER: _ClassVar[int]
    REQUEUED_AT_FIELD_NUMBER: _ClassVar[int]
    RUNNING_AT_FIELD_NUMBER: _ClassVar[int]
    FIRST_STEP_AT_FIELD_NUMBER: _ClassVar[int]
    RELAUNCHED_AT_FIELD_NUMBER: _ClassVar[int]
    cause: TerminationCause
    failed_nodes: _containers.RepeatedScalarFieldContainer[str]
    time: _timestamp_pb2.Timestamp
    checkpoint_step: int
    exit_code: int
    detail: str
    nodes_before: int
    nodes_after: int
    detected_by: str
    failed_at: _timestamp_pb2.Timestamp
    detected_at: _timestamp_pb2.Timestamp
    requeued_at: _timestamp_pb2.Timestamp
    running_at: _timestamp_pb2.Timestamp
    first_step_at: _timestamp_pb2.Timestamp
    relaunched_at: _timestamp_pb2.Timestamp
    def __init__(self, cause: _Optional[_Union[TerminationCause, str]] = ..., failed_nodes: _Optional[_Iterable[str]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., checkpoint_step: _Optional[int] = ..., exit_code: _Optional[int] = ..., detail: _Optional[str] = ..., nodes_before: _Optional[int] = ..., nodes_after: _Optional[int] = ..., detected_by: _Optional[str] = ..., failed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., detected_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., requeued_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., running_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., first_step_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., relaunched_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ArrayTask(_message.Message):
    __slots__ = ("task_id", "state", "exit_code", "exit_signal", "nodes", "has_exit_code", "restart_count")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_SIGNAL_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    RESTART_COUNT_FIELD_NUMBER: _ClassVar[int]
    task_id: int
    state: JobState
    exit_code: int
    exit_signal: int
    nodes: _containers.RepeatedScalarFieldContainer[str]
    has_exit_code: bool
    restart_count: int
    def __init__(self, task_id: _Optional[int] = ..., state: _Optional[_Union[JobState, str]] = ..., exit_code: _Optional[int] = ..., exit_signal: _Optional[int] = ..., nodes: _Optional[_Iterable[str]] = ..., has_exit_code: _Optional[bool] = ..., restart_count: _Optional[int] = ...) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("job_id", "name", "user", "state", "reason", "nodes", "restart_count", "exit_code", "exit_signal", "submit_time", "start_time", "end_time", "placement_explanation", "restarts", "partition", "request_id", "terminal", "final_reason", "checkpoint_step", "excluded_nodes", "spec", "original_submit_time", "time_limit", "working_directory", "stdout_path", "stderr_path", "has_exit_code", "array", "tasks", "stragglers")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    RESTART_COUNT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_SIGNAL_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_FIELD_NUMBER: _ClassVar[int]
    FINAL_REASON_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_STEP_FIELD_NUMBER: _ClassVar[int]
    EXCLUDED_NODES_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    ORIGINAL_SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    TIME_LIMIT_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    STDOUT_PATH_FIELD_NUMBER: _ClassVar[int]
    STDERR_PATH_FIELD_NUMBER: _ClassVar[int]
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    STRAGGLERS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    user: str
    state: JobState
    reason: str
    nodes: _containers.RepeatedScalarFieldContainer[str]
    restart_count: int
    exit_code: int
    exit_signal: int
    submit_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    placement_explanation: str
    restarts: _containers.RepeatedCompositeFieldContainer[RestartRecord]
    partition: str
    request_id: str
    terminal: bool
    final_reason: str
    checkpoint_step: int
    excluded_nodes: _containers.RepeatedScalarFieldContainer[str]
    spec: JobSpec
    original_submit_time: _timestamp_pb2.Timestamp
    time_limit: _duration_pb2.Duration
    working_directory: str
    stdout_path: str
    stderr_path: str
    has_exit_code: bool
    array: str
    tasks: _containers.RepeatedCompositeFieldContainer[ArrayTask]
    stragglers: _containers.RepeatedCompositeFieldContainer[Straggler]
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., user: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., reason: _Optional[str] = ..., nodes: _Optional[_Iterable[str]] = ..., restart_count: _Optional[int] = ..., exit_code: _Optional[int] = ..., exit_signal: _Optional[int] = ..., submit_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., placement_explanation: _Optional[str] = ..., restarts: _Optional[_Iterable[_Union[RestartRecord, _Mapping]]] = ..., partition: _Optional[str] = ..., request_id: _Optional[str] = ..., terminal: _Optional[bool] = ..., final_reason: _Optional[str] = ..., checkpoint_step: _Optional[int] = ..., excluded_nodes: _Optional[_Iterable[str]] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., original_submit_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., time_limit: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., working_directory: _Optional[str] = ..., stdout_path: _Optional[str] = ..., stderr_path: _Optional[str] = ..., has_exit_code: _Optional[bool] = ..., array: _Optional[str] = ..., tasks: _Optional[_Iterable[_Union[ArrayTask, _Mapping]]] = ..., stragglers: _Optional[_Iterable[_Union[Straggler, _Mapping]]] = ...) -> None: ...

class Straggler(_message.Message):
    __slots__ = ("node", "ratio")
    NODE_FIELD_NUMBER: _ClassVar[int]
    RATIO_FIELD_NUMBER: _ClassVar[int]
    node: str
    ratio: float
    def __init__(self, node: _Optional[str] = ..., ratio: _Optional[float] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: JobSpec
    def __init__(self, spec: _Optional[_Union[JobSpec, _Mapping]] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job", "duplicate")
    JOB_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    job: JobStatus
    duplicate: bool
    def __init__(self, job: _Optional[_Union[JobStatus, _Mapping]] = ..., duplicate: _Optional[bool] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: JobStatus
    def __init__(self, job: _Optional[_Union[JobStatus, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("states", "user", "limit", "include_finished")
    STATES_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_FINISHED_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[JobState]
    user: str
    limit: int
    include_finished: bool
    def __init__(self, states: _Optional[_Iterable[_Union[JobState, str]]] = ..., user: _Optional[str] = ..., limit: _Optional[int] = ..., include_finished: _Optional[bool] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobStatus]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobStatus, _Mapping]]] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: JobStatus
    def __init__(self, job: _Optional[_Union[JobStatus, _Mapping]] = ...) -> None: ...

class RequeueJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class RequeueJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: JobStatus
    def __init__(self, job: _Optional[_Union[JobStatus, _Mapping]] = ...) -> None: ...

class WatchJobsRequest(_message.Message):
    __slots__ = ("job_ids", "include_initial", "resume_token")
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_INITIAL_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    include_initial: bool
    resume_token: str
    def __init__(self, job_ids: _Optional[_Iterable[str]] = ..., include_initial: _Optional[bool] = ..., resume_token: _Optional[str] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("type", "job", "time", "previous_state", "message", "resume_token")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    JOB_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESUME_TOKEN_FIELD_NUMBER: _ClassVar[int]
    type: JobEventType
    job: JobStatus
    time: _timestamp_pb2.Timestamp
    previous_state: JobState
    message: str
    resume_token: str
    def __init__(self, type: _Optional[_Union[JobEventType, str]] = ..., job: _Optional[_Union[JobStatus, _Mapping]] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., previous_state: _Optional[_Union[JobState, str]] = ..., message: _Optional[str] = ..., resume_token: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("record_id", "token", "job_id", "restart_count", "rank", "world_size", "node", "pid", "step", "committed_step", "restored", "exiting", "exit_code", "stopping_step", "relaunch", "step_seconds", "stack", "save_stall_seconds", "saves")
    RECORD_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RESTART_COUNT_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_STEP_FIELD_NUMBER: _ClassVar[int]
    RESTORED_FIELD_NUMBER: _ClassVar[int]
    EXITING_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STOPPING_STEP_FIELD_NUMBER: _ClassVar[int]
    RELAUNCH_FIELD_NUMBER: _ClassVar[int]
    STEP_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STACK_FIELD_NUMBER: _ClassVar[int]
    SAVE_STALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SAVES_FIELD_NUMBER: _ClassVar[int]
    record_id: int
    token: str
    job_id: str
    restart_count: int
    rank: int
    world_size: int
    node: str
    pid: int
    step: int
    committed_step: int
    restored: bool
    exiting: bool
    exit_code: int
    stopping_step: int
    relaunch: int
    step_seconds: float
    stack: str
    save_stall_seconds: float
    saves: int
    def __init__(self, record_id: _Optional[int] = ..., token: _Optional[str] = ..., job_id: _Optional[str] = ..., restart_count: _Optional[int] = ..., rank: _Optional[int] = ..., world_size: _Optional[int] = ..., node: _Optional[str] = ..., pid: _Optional[int] = ..., step: _Optional[int] = ..., committed_step: _Optional[int] = ..., restored: _Optional[bool] = ..., exiting: _Optional[bool] = ..., exit_code: _Optional[int] = ..., stopping_step: _Optional[int] = ..., relaunch: _Optional[int] = ..., step_seconds: _Optional[float] = ..., stack: _Optional[str] = ..., save_stall_seconds: _Optional[float] = ..., saves: _Optional[int] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("interval", "stop", "stopping", "stop_step", "want_stack", "checkpoint_interval")
    INTERVAL_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STOPPING_FIELD_NUMBER: _ClassVar[int]
    STOP_STEP_FIELD_NUMBER: _ClassVar[int]
    WANT_STACK_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    interval: _duration_pb2.Duration
    stop: bool
    stopping: bool
    stop_step: int
    want_stack: bool
    checkpoint_interval: _duration_pb2.Duration
    def __init__(self, interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., stop: _Optional[bool] = ..., stopping: _Optional[bool] = ..., stop_step: _Optional[int] = ..., want_stack: _Optional[bool] = ..., checkpoint_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ReadJobLogRequest(_message.Message):
    __slots__ = ("job_id", "stream", "tail_lines", "follow")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TAIL_LINES_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    stream: LogStream
    tail_lines: int
    follow: bool
    def __init__(self, job_id: _Optional[str] = ..., stream: _Optional[_Union[LogStream, str]] = ..., tail_lines: _Optional[int] = ..., follow: _Optional[bool] = ...) -> None: ...

class JobLogChunk(_message.Message):
    __slots__ = ("data", "path", "offset", "notice", "state", "restart_count")
    DATA_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NOTICE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RESTART_COUNT_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    path: str
    offset: int
    notice: str
    state: JobState
    restart_count: int
    def __init__(self, data: _Optional[bytes] = ..., path: _Optional[str] = ..., offset: _Optional[int] = ..., notice: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., restart_count: _Optional[int] = ...) -> None: ...

class ListHistoryRequest(_message.Message):
    __slots__ = ("states", "name", "user", "since", "until", "limit")
    STATES_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[JobState]
    name: str
    user: str
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    limit: int
    def __init__(self, states: _Optional[_Iterable[_Union[JobState, str]]] = ..., name: _Optional[str] = ..., user: _Optional[str] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., limit: _Optional[int] = ...) -> None: ...

class HistoryEntry(_message.Message):
    __slots__ = ("job_id", "name", "user", "state", "exit_code", "exit_signal", "has_exit_code", "elapsed", "restart_count", "nodes", "submit_time", "start_time", "end_time", "partition", "final_reason", "source")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_SIGNAL_FIELD_NUMBER: _ClassVar[int]
    HAS_EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_FIELD_NUMBER: _ClassVar[int]
    RESTART_COUNT_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    FINAL_REASON_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    user: str
    state: JobState
    exit_code: int
    exit_signal: int
    has_exit_code: bool
    elapsed: _duration_pb2.Duration
    restart_count: int
    nodes: _containers.RepeatedScalarFieldContainer[str]
    submit_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    partition: str
    final_reason: str
    source: str
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., user: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., exit_code: _Optional[int] = ..., exit_signal: _Optional[int] = ..., has_exit_code: _Optional[bool] = ..., elapsed: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., restart_count: _Optional[int] = ..., nodes: _Optional[_Iterable[str]] = ..., submit_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., partition: _Optional[str] = ..., final_reason: _Optional[str] = ..., source: _Optional[str] = ...) -> None: ...

class ListHistoryResponse(_message.Message):
    __slots__ = ("jobs", "accounting", "accounting_note")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    ACCOUNTING_FIELD_NUMBER: _ClassVar[int]
    ACCOUNTING_NOTE_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[HistoryEntry]
    accounting: bool
    accounting_note: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[HistoryEntry, _Mapping]]] = ..., accounting: _Optional[bool] = ..., accounting_note: _Optional[str] = ...) -> None: ...

class HoldJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class HoldJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: JobStatus
    def __init__(self, job: _Optional[_Union[JobStatus, _Mapping]] = ...) -> None: ...

class ReleaseJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ReleaseJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: JobStatus
    def __init__(self, job: _Optional[_Union[JobStatus, _Mapping]] = ...) -> None: ...

class ListQueueRequest(_message.Message):
    __slots__ = ("partition", "states")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    partition: str
    states: _containers.RepeatedScalarFieldContainer[JobState]
    def __init__(self, partition: _Optional[str] = ..., states: _Optional[_Iterable[_Union[JobState, str]]] = ...) -> None: ...

class QueueEntry(_message.Message):
    __slots__ = ("job_id", "partition", "name", "user", "state", "reason", "nodes", "submit_time", "start_time", "mine", "supervised", "end_time")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    MINE_FIELD_NUMBER: _ClassVar[int]
    SUPERVISED_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    partition: str
    name: str
    user: str
    state: JobState
    reason: str
    nodes: _containers.RepeatedScalarFieldContainer[str]
    submit_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    mine: bool
    supervised: bool
    end_time: _timestamp_pb2.Timestamp
    def __init__(self, job_id: _Optional[str] = ..., partition: _Optional[str] = ..., name: _Optional[str] = ..., user: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., reason: _Optional[str] = ..., nodes: _Optional[_Iterable[str]] = ..., submit_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., mine: _Optional[bool] = ..., supervised: _Optional[bool] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ListQueueResponse(_message.Message):
    __slots__ = ("jobs", "as_of")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    AS_OF_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[QueueEntry]
    as_of: _timestamp_pb2.Timestamp
    def __init__(self, jobs: _Optional[_Iterable[_Union[QueueEntry, _Mapping]]] = ..., as_of: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class AdoptJobRequest(_message.Message):
    __slots__ = ("job_id", "checkpoint_uri")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_URI_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    checkpoint_uri: str
    def __init__(self, job_id: _Optional[str] = ..., checkpoint_uri: _Optional[str] = ...) -> None: ...

class AdoptJobResponse(_message.Message):
    __slots__ = ("job", "already")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ALREADY_FIELD_NUMBER: _ClassVar[int]
    job: JobStatus
    already: bool
    def __init__(self, job: _Optional[_Union[JobStatus, _Mapping]] = ..., already: _Optional[bool] = ...) -> None: ...

class ListJobCheckpointsRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class CheckpointInfo(_message.Message):
    __slots__ = ("step", "bytes", "world_size", "committed_at", "verification", "detail")
    STEP_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    COMMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    step: int
    bytes: int
    world_size: int
    committed_at: _timestamp_pb2.Timestamp
    verification: str
    detail: str
    def __init__(self, step: _Optional[int] = ..., bytes: _Optional[int] = ..., world_size: _Optional[int] = ..., committed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., verification: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class ListJobCheckpointsResponse(_message.Message):
    __slots__ = ("uri", "checkpoints", "error")
    URI_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    uri: str
    checkpoints: _containers.RepeatedCompositeFieldContainer[CheckpointInfo]
    error: str
    def __init__(self, uri: _Optional[str] = ..., checkpoints: _Optional[_Iterable[_Union[CheckpointInfo, _Mapping]]] = ..., error: _Optional[str] = ...) -> None: ...

class GetGoodputRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GoodputBreakdown(_message.Message):
    __slots__ = ("productive", "queue", "start_restore", "checkpoint_stall", "detection", "restart", "lost")
    PRODUCTIVE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    START_RESTORE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_STALL_FIELD_NUMBER: _ClassVar[int]
    DETECTION_FIELD_NUMBER: _ClassVar[int]
    RESTART_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    productive: float
    queue: float
    start_restore: float
    checkpoint_stall: float
    detection: float
    restart: float
    lost: float
    def __init__(self, productive: _Optional[float] = ..., queue: _Optional[float] = ..., start_restore: _Optional[float] = ..., checkpoint_stall: _Optional[float] = ..., detection: _Optional[float] = ..., restart: _Optional[float] = ..., lost: _Optional[float] = ...) -> None: ...

class GetGoodputResponse(_message.Message):
    __slots__ = ("job_id", "ettr", "wall_seconds", "breakdown", "checkpoint_interval")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ETTR_FIELD_NUMBER: _ClassVar[int]
    WALL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BREAKDOWN_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    ettr: float
    wall_seconds: float
    breakdown: GoodputBreakdown
    checkpoint_interval: _duration_pb2.Duration
    def __init__(self, job_id: _Optional[str] = ..., ettr: _Optional[float] = ..., wall_seconds: _Optional[float] = ..., breakdown: _Optional[_Union[GoodputBreakdown, _Mapping]] = ..., checkpoint_interval: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

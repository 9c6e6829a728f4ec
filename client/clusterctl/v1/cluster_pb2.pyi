from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PlacementPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PLACEMENT_POLICY_UNSPECIFIED: _ClassVar[PlacementPolicy]
    PLACEMENT_POLICY_PACK: _ClassVar[PlacementPolicy]
    PLACEMENT_POLICY_ANY: _ClassVar[PlacementPolicy]
    PLACEMENT_POLICY_EXACT: _ClassVar[PlacementPolicy]

class NodeState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_STATE_UNSPECIFIED: _ClassVar[NodeState]
    NODE_STATE_IDLE: _ClassVar[NodeState]
    NODE_STATE_MIXED: _ClassVar[NodeState]
    NODE_STATE_ALLOCATED: _ClassVar[NodeState]
    NODE_STATE_DOWN: _ClassVar[NodeState]
    NODE_STATE_DRAINING: _ClassVar[NodeState]
    NODE_STATE_DRAINED: _ClassVar[NodeState]
    NODE_STATE_RESERVED: _ClassVar[NodeState]
    NODE_STATE_UNKNOWN: _ClassVar[NodeState]
PLACEMENT_POLICY_UNSPECIFIED: PlacementPolicy
PLACEMENT_POLICY_PACK: PlacementPolicy
PLACEMENT_POLICY_ANY: PlacementPolicy
PLACEMENT_POLICY_EXACT: PlacementPolicy
NODE_STATE_UNSPECIFIED: NodeState
NODE_STATE_IDLE: NodeState
NODE_STATE_MIXED: NodeState
NODE_STATE_ALLOCATED: NodeState
NODE_STATE_DOWN: NodeState
NODE_STATE_DRAINING: NodeState
NODE_STATE_DRAINED: NodeState
NODE_STATE_RESERVED: NodeState
NODE_STATE_UNKNOWN: NodeState

class PlacementPreference(_message.Message):
    __slots__ = ("policy", "max_wait_seconds", "switch_count", "exclude_nodes", "nodelist", "constraints")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    MAX_WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SWITCH_COUNT_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_NODES_FIELD_NUMBER: _ClassVar[int]
    NODELIST_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINTS_FIELD_NUMBER: _ClassVar[int]
    policy: PlacementPolicy
    max_wait_seconds: int
    switch_count: int
    exclude_nodes: _containers.RepeatedScalarFieldContainer[str]
    nodelist: _containers.RepeatedScalarFieldContainer[str]
    constraints: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, policy: _Optional[_Union[PlacementPolicy, str]] = ..., max_wait_seconds: _Optional[int] = ..., switch_count: _Optional[int] = ..., exclude_nodes: _Optional[_Iterable[str]] = ..., nodelist: _Optional[_Iterable[str]] = ..., constraints: _Optional[_Iterable[str]] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("name", "state", "switch", "cpus_total", "cpus_allocated", "gpus_total", "gpus_allocated", "memory_mb_total", "memory_mb_allocated", "partitions", "features", "reason", "flags", "health")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SWITCH_FIELD_NUMBER: _ClassVar[int]
    CPUS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CPUS_ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    GPUS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GPUS_ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_TOTAL_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: NodeState
    switch: str
    cpus_total: int
    cpus_allocated: int
    gpus_total: int
    gpus_allocated: int
    memory_mb_total: int
    memory_mb_allocated: int
    partitions: _containers.RepeatedScalarFieldContainer[str]
    features: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    flags: _containers.RepeatedScalarFieldContainer[str]
    health: str
    def __init__(self, name: _Optional[str] = ..., state: _Optional[_Union[NodeState, str]] = ..., switch: _Optional[str] = ..., cpus_total: _Optional[int] = ..., cpus_allocated: _Optional[int] = ..., gpus_total: _Optional[int] = ..., gpus_allocated: _Optional[int] = ..., memory_mb_total: _Optional[int] = ..., memory_mb_allocated: _Optional[int] = ..., partitions: _Optional[_Iterable[str]] = ..., features: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ..., flags: _Optional[_Iterable[str]] = ..., health: _Optional[str] = ...) -> None: ...

class Switch(_message.Message):
    __slots__ = ("name", "level", "nodes", "switches", "nodes_total", "nodes_free", "gpus_total", "gpus_free", "cpus_total", "cpus_free")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    NODES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    NODES_FREE_FIELD_NUMBER: _ClassVar[int]
    GPUS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GPUS_FREE_FIELD_NUMBER: _ClassVar[int]
    CPUS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    CPUS_FREE_FIELD_NUMBER: _ClassVar[int]
    name: str
    level: int
    nodes: _containers.RepeatedScalarFieldContainer[str]
    switches: _containers.RepeatedScalarFieldContainer[str]
    nodes_total: int
    nodes_free: int
    gpus_total: int
    gpus_free: int
    cpus_total: int
    cpus_free: int
    def __init__(self, name: _Optional[str] = ..., level: _Optional[int] = ..., nodes: _Optional[_Iterable[str]] = ..., switches: _Optional[_Iterable[str]] = ..., nodes_total: _Optional[int] = ..., nodes_free: _Optional[int] = ..., gpus_total: _Optional[int] = ..., gpus_free: _Optional[int] = ..., cpus_total: _Optional[int] = ..., cpus_free: _Optional[int] = ...) -> None: ...

class Topology(_message.Message):
    __slots__ = ("switches", "nodes", "roots")
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    ROOTS_FIELD_NUMBER: _ClassVar[int]
    switches: _containers.RepeatedCompositeFieldContainer[Switch]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    roots: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, switches: _Optional[_Iterable[_Union[Switch, _Mapping]]] = ..., nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ..., roots: _Optional[_Iterable[str]] = ...) -> None: ...

class GetTopologyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetTopologyResponse(_message.Message):
    __slots__ = ("topology",)
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    topology: Topology
    def __init__(self, topology: _Optional[_Union[Topology, _Mapping]] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ("partition", "states")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    partition: str
    states: _containers.RepeatedScalarFieldContainer[NodeState]
    def __init__(self, partition: _Optional[str] = ..., states: _Optional[_Iterable[_Union[NodeState, str]]] = ...) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    def __init__(self, nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ...) -> None: ...

class PlanPlacementRequest(_message.Message):
    __slots__ = ("nodes", "gpus_per_node", "cpus_per_node", "partition", "placement")
    NODES_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    CPUS_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    nodes: int
    gpus_per_node: int
    cpus_per_node: int
    partition: str
    placement: PlacementPreference
    def __init__(self, nodes: _Optional[int] = ..., gpus_per_node: _Optional[int] = ..., cpus_per_node: _Optional[int] = ..., partition: _Optional[str] = ..., placement: _Optional[_Union[PlacementPreference, _Mapping]] = ...) -> None: ...

class Placement(_message.Message):
    __slots__ = ("feasible", "available_now", "nodes", "switches", "spine_hops", "explanation", "sbatch_args")
    FEASIBLE_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_NOW_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    SWITCHES_FIELD_NUMBER: _ClassVar[int]
    SPINE_HOPS_FIELD_NUMBER: _ClassVar[int]
    EXPLANATION_FIELD_NUMBER: _ClassVar[int]
    SBATCH_ARGS_FIELD_NUMBER: _ClassVar[int]
    feasible: bool
    available_now: bool
    nodes: _containers.RepeatedScalarFieldContainer[str]
    switches: _containers.RepeatedScalarFieldContainer[str]
    spine_hops: int
    explanation: str
    sbatch_args: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, feasible: _Optional[bool] = ..., available_now: _Optional[bool] = ..., nodes: _Optional[_Iterable[str]] = ..., switches: _Optional[_Iterable[str]] = ..., spine_hops: _Optional[int] = ..., explanation: _Optional[str] = ..., sbatch_args: _Optional[_Iterable[str]] = ...) -> None: ...

class PlanPlacementResponse(_message.Message):
    __slots__ = ("placement",)
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    placement: Placement
    def __init__(self, placement: _Optional[_Union[Placement, _Mapping]] = ...) -> None: ...

from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Window(_message.Message):
    __slots__ = ("t_s", "duration_s", "requests", "ok", "throughput", "p50_ms", "p99_ms", "send_lag_p99_ms")
    T_S_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    OK_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    P99_MS_FIELD_NUMBER: _ClassVar[int]
    SEND_LAG_P99_MS_FIELD_NUMBER: _ClassVar[int]
    t_s: float
    duration_s: float
    requests: int
    ok: int
    throughput: float
    p50_ms: float
    p99_ms: float
    send_lag_p99_ms: float
    def __init__(self, t_s: _Optional[float] = ..., duration_s: _Optional[float] = ..., requests: _Optional[int] = ..., ok: _Optional[int] = ..., throughput: _Optional[float] = ..., p50_ms: _Optional[float] = ..., p99_ms: _Optional[float] = ..., send_lag_p99_ms: _Optional[float] = ...) -> None: ...

class ProgressReport(_message.Message):
    __slots__ = ("job_id", "attempt", "follower_id", "point_index", "windows", "dropped")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FOLLOWER_ID_FIELD_NUMBER: _ClassVar[int]
    POINT_INDEX_FIELD_NUMBER: _ClassVar[int]
    WINDOWS_FIELD_NUMBER: _ClassVar[int]
    DROPPED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    follower_id: str
    point_index: int
    windows: _containers.RepeatedCompositeFieldContainer[Window]
    dropped: int
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., follower_id: _Optional[str] = ..., point_index: _Optional[int] = ..., windows: _Optional[_Iterable[_Union[Window, _Mapping]]] = ..., dropped: _Optional[int] = ...) -> None: ...

class ReportReply(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    def __init__(self, accepted: _Optional[bool] = ...) -> None: ...

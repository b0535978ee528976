"""loom streams and events: torch.Stream / torch.Event of the loom device."""

import torch

from .. import _C
from ._utils import _get_device_index


class Stream(torch.Stream):
    """An in-order queue of loom work. ``priority`` < 0 is high priority.

    Streams of one device run concurrently; order them with
    :meth:`wait_stream` / :meth:`wait_event`."""

    def __new__(cls, device=None, priority: int = 0, **kwargs):
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        index = _get_device_index(device, optional=True)
        return super().__new__(cls, device=torch.device("loom", index), priority=priority)

    def record_event(self, event=None):
        if event is None:
            event = Event()
        event.record(self)
        return event

    def queue_waits(self) -> int:
        """How many times a thread waited for room in this stream's full
        queue: it holds at most ``LOOM_QUEUE_DEPTH`` pending commands (default
        1024), and a submitting thread waits, without the GIL, until its work
        drains to 7/8 of that."""
        return _C._stream_queue_waits(self)

    def __repr__(self):
        return f"<torch.loom.Stream device=loom:{self.device_index} stream_id={self.stream_id}>"


class Event(torch.Event):
    """A marker in a stream: for ordering across streams and timing."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        return super().__new__(
            cls,
            device=torch.device("loom", _C._get_device()),
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=interprocess,
        )

    def record(self, stream=None):
        if stream is None:
            stream = current_stream()
        super().record(stream)

    def wait(self, stream=None):
        if stream is None:
            stream = current_stream()
        super().wait(stream)

    def elapsed_time(self, end_event) -> float:
        """Milliseconds from this event to ``end_event`` (both recorded,
        created with ``enable_timing=True``)."""
        return _C._event_elapsed_time(self, end_event)


def _wrap(s: torch.Stream) -> Stream:
    return Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)


def current_stream(device=None) -> Stream:
    from . import _lazy_init

    _lazy_init()
    return _wrap(torch._C._accelerator_getStream(_get_device_index(device, optional=True)))


def default_stream(device=None) -> Stream:
    from . import _lazy_init

    _lazy_init()
    index = _get_device_index(device, optional=True)
    return Stream(stream_id=0, device_index=index, device_type=current_stream(index).device_type)


def set_stream(stream: torch.Stream) -> None:
    if stream is None:
        return
    torch._C._accelerator_setStream(stream)


class StreamContext:
    """Makes ``stream`` current (and its device) inside the block."""

    def __init__(self, stream):
        self.stream = stream
        self.prev_device = None
        self.prev_stream = None

    def __enter__(self):
        if self.stream is None:
            return self.stream
        from . import current_device

        self.prev_device = current_device()
        self.prev_stream = current_stream(self.stream.device_index)
        self.prev_dst_stream = current_stream(self.prev_device)
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *exc):
        if self.stream is None:
            return False
        set_stream(self.prev_stream)
        set_stream(self.prev_dst_stream)
        _C._set_device(self.prev_device)
        return False


def stream(stream) -> StreamContext:
    return StreamContext(stream)

"""Graph capture and replay on foo, as ``torch.cuda.graphs``.

A graph records the work launched on a stream between ``capture_begin`` and ``capture_end`` (operators'
kernels, copies between foo tensors, ``foo_backend.ops`` and torch.compile kernels), with the memory it
allocates taken from the graph's own pool; ``replay`` queues the same work again on the current stream, on
the same memory, without dispatching anything on the host. As on CUDA, capture happens on a stream other
than the default one, inputs and outputs are static tensors (copy new data into the inputs, read the
outputs after a replay), and what would make the host wait for the capturing stream raises
"operation not permitted when stream is capturing": synchronizing, reading values on the host (``.item()``,
``.cpu()``), and an operator's first call with a new signature (foo runs it synchronously to learn its
outputs: warm the function up before capturing it, as CUDA asks). Random operators run synchronously on foo,
so they cannot be captured yet.
"""
import gc
from typing import Any, Optional

import torch

from ._utils import _C, _lazy_init

__all__ = ["FooGraph", "graph", "graph_pool_handle", "is_current_stream_capturing"]


def is_current_stream_capturing() -> bool:
    """Whether the current stream of the current foo device is capturing a graph."""
    if not torch.foo.is_initialized():
        return False
    return _C._is_current_stream_capturing()


def graph_pool_handle() -> tuple[int, int]:
    """A memory pool id: graphs captured with it share their memory (``torch.cuda.graph_pool_handle``)."""
    return _C._graph_pool_handle()


class FooGraph(torch.accelerator.Graph):
    """A foo graph, as ``torch.cuda.CUDAGraph``: ``capture_begin``/``capture_end`` around the work to record
    (on a non-default stream), then ``replay()``; ``reset()`` frees it; ``pool()`` is the id of its memory pool,
    which another graph's ``capture_begin(pool=...)`` can share."""

    def __new__(cls, keep_graph: bool = False):
        return super().__new__(cls, keep_graph)

    def __init__(self, keep_graph: bool = False):
        super().__init__(keep_graph)

    def capture_begin(self, pool: Optional[tuple[int, int]] = None, capture_error_mode: str = "global") -> None:
        """Begin capturing the current stream's work. ``capture_error_mode`` is accepted for CUDA's
        signature; foo has one mode: whatever would wait for the capturing stream raises."""
        _lazy_init()
        self.graph_pool = pool
        self.capture_error_mode = capture_error_mode
        super().capture_begin()


class graph:
    """Context manager that captures the work of its block into ``foo_graph``, as ``torch.cuda.graph``: it
    synchronizes the device, frees cached memory, and captures on ``stream`` (default: a side stream of the
    current device, one per device) with the memory pool ``pool`` (default: the graph's own)."""

    default_capture_streams: dict[int, torch.Stream] = {}

    def __init__(self, foo_graph: FooGraph, pool: Optional[tuple[int, int]] = None,
                 stream: Optional[torch.Stream] = None, capture_error_mode: str = "global") -> None:
        _lazy_init()
        device = torch.foo.current_device()
        if stream is None:
            stream = self.default_capture_streams.setdefault(device, torch.foo.Stream(device))
        self.foo_graph = foo_graph
        self.pool = pool
        self.capture_error_mode = capture_error_mode
        self.stream_context = torch.foo.stream(stream)

    def __enter__(self) -> None:
        torch.foo.synchronize()
        gc.collect()
        torch.foo.empty_cache()
        self.stream_context.__enter__()
        self.foo_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)

    def __exit__(self, *exc_info: Any) -> None:
        try:
            self.foo_graph.capture_end()
        finally:
            self.stream_context.__exit__(*exc_info)

"""Graph capture and replay on foo, as ``torch.cuda.graphs``.

A graph records the work launched on a stream between ``capture_begin`` and ``capture_end`` (operators'
kernels, copies between foo tensors, ``foo_backend.ops`` and torch.compile kernels), and on the streams that
wait on it meanwhile (which join the capture, as on CUDA), with the memory it allocates taken from the
graph's own pool; ``replay`` queues the same work again on the current stream, on the same memory, without
dispatching anything on the host. As on CUDA, capture happens on a stream other than the default one,
inputs and outputs are static tensors (copy new data into the inputs, read the outputs after a replay), and
what would make the host wait for the capturing stream raises "operation not permitted when stream is
capturing": synchronizing, reading values on the host (``.item()``, ``.cpu()``), waiting on events across
the capture's boundary, and an operator's first call with a new signature (foo runs it synchronously to
learn its outputs: warm the function up before capturing it, as CUDA asks). Random operators are captured: a
replay draws from the generator when it runs, and host uses of generator state wait for earlier replays, so
each replay draws what the same calls would draw eagerly at that point (CUDA takes philox offsets at replay).
"""
import gc
from typing import Any, Callable, Optional

import torch
from torch.utils import _pytree as pytree

from ._utils import _C, DEVICE_TYPE, _lazy_init

__all__ = ["FooGraph", "graph", "graph_pool_handle", "is_current_stream_capturing", "make_graphed_callables"]


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
    which another graph's ``capture_begin(pool=...)`` can share.

    Args:
        keep_graph (bool, optional): accepted for ``torch.cuda.CUDAGraph``'s signature. A foo graph needs no
            instantiation (``instantiate()`` only checks that a capture exists), so it changes nothing.
    """

    def __new__(cls, keep_graph: bool = False):
        return super().__new__(cls, keep_graph)

    def __init__(self, keep_graph: bool = False):
        super().__init__(keep_graph)

    def capture_begin(self, pool: Optional[tuple[int, int]] = None, capture_error_mode: str = "global") -> None:
        """Begin capturing the current stream's work. Typically, you shouldn't call ``capture_begin``
        yourself: use :class:`graph` or :func:`make_graphed_callables`, which call it.

        Args:
            pool (tuple[int, int], optional): token (returned by :func:`graph_pool_handle` or another graph's
                ``pool()``) of a memory pool this graph's capture shares. Default: a pool of the graph's own.
            capture_error_mode (str, optional): accepted for CUDA's signature (``"global"``,
                ``"thread_local"``, ``"relaxed"``); foo has one mode: whatever would wait for the capturing
                stream raises.
        """
        _lazy_init()
        self.graph_pool = pool
        self.capture_error_mode = capture_error_mode
        super().capture_begin()

    def register_generator_state(self, state: torch.Generator) -> None:
        """Register a foo generator's state (``generator.graphsafe_get_state()`` or ``clone_state()``) whose
        numbers the graph's random kernels draw, as ``torch.cuda.CUDAGraph.register_generator_state``. foo's
        captured random kernels draw at each replay from the state their generator had when they were
        captured, so every state is used as a registered one is: this checks that it is a foo generator's.

        Args:
            state (torch.Generator): a foo generator's state, from ``graphsafe_get_state()`` or ``clone_state()``.
        """
        if not isinstance(state, torch.Generator) or state.device.type != DEVICE_TYPE:
            raise TypeError(f"register_generator_state expects a foo generator's state, got {state!r}")


class graph:
    """Context manager that captures the work of its block into a :class:`FooGraph` for later replay, as
    ``torch.cuda.graph``: on entry it synchronizes the device and frees cached memory.

    Args:
        foo_graph (FooGraph): the graph to capture into.
        pool (tuple[int, int], optional): token (returned by :func:`graph_pool_handle` or another graph's
            ``pool()``) of a memory pool this graph's capture shares. Default: a pool of the graph's own.
        stream (torch.Stream, optional): the stream the block runs and is captured on. Default: a side
            stream of the current device (one per device, :meth:`default_capture_stream`).
        capture_error_mode (str, optional): accepted for CUDA's signature; see :meth:`FooGraph.capture_begin`.
    """

    _default_capture_streams: dict[int, torch.Stream] = {}

    def __init__(self, foo_graph: FooGraph, pool: Optional[tuple[int, int]] = None,
                 stream: Optional[torch.Stream] = None, capture_error_mode: str = "global") -> None:
        _lazy_init()
        if stream is None:
            stream = self.default_capture_stream(torch.foo.current_device())
        self.foo_graph = foo_graph
        self.pool = pool
        self.capture_error_mode = capture_error_mode
        self.stream_context = torch.foo.stream(stream)

    @classmethod
    def default_capture_stream(cls, device: int) -> torch.Stream:
        """Return the side stream that graphs of a foo device are captured on unless told otherwise.

        Args:
            device (int): the index of the foo device.
        """
        if device not in cls._default_capture_streams:
            cls._default_capture_streams[device] = torch.foo.Stream(device)
        return cls._default_capture_streams[device]

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


def make_graphed_callables(callables, sample_args, num_warmup_iters: int = 3, allow_unused_input: bool = False,
                           pool: Optional[tuple[int, int]] = None):
    """Graphed versions of callables (functions or modules), as ``torch.cuda.make_graphed_callables``: each
    one's forward and backward are captured once, on its ``sample_args`` (tensors only), and every later
    call copies its arguments into the captured inputs, replays the forward graph, and, in backward, the
    backward graph. A tuple of callables (with a tuple of sample-argument tuples) shares one memory pool and
    must then be called in the order given. Modules must have no hooks, and only parameters may require
    grad; arguments must come in the form of ``sample_args``. A graphed module replays its graphs only in
    the training mode it was captured in; in the other, it runs eagerly.

    Args:
        callables (torch.nn.Module or Python function, or tuple of these): callable or callables to graph.
        sample_args (tuple of Tensors, or tuple of tuples of Tensors): sample arguments for each callable:
            a tuple of tensors for one callable, a tuple of such tuples for a tuple of callables.
        num_warmup_iters (int): the number of warm-up runs (forward and backward) before capture, on the
            capture stream. Default: ``3``.
        allow_unused_input (bool): if False, an input that the outputs do not depend on (whose gradient is
            always zero) is an error. Default: False.
        pool (tuple[int, int], optional): token (returned by :func:`graph_pool_handle` or another graph's
            ``pool()``) of a memory pool the captures share. Default: a pool of the graph's own.

    Returns:
        The graphed callable, or a tuple of them for a tuple of callables (a module is returned itself,
        its ``forward`` replaced).
    """
    if torch.is_autocast_enabled("foo") and torch.is_autocast_cache_enabled():
        raise RuntimeError("make_graphed_callables does not support the autocast cache: use cache_enabled=False")
    one_callable = not isinstance(callables, tuple)
    if one_callable:
        callables, sample_args = (callables,), (sample_args,)
    flat_args = []
    for fn, args in zip(callables, sample_args):
        if isinstance(fn, torch.nn.Module):
            if fn._backward_hooks or fn._forward_hooks or fn._forward_pre_hooks:
                raise RuntimeError("make_graphed_callables: modules must have no hooks when they are graphed")
            if any(b.requires_grad for b in fn.buffers()):
                raise RuntimeError("make_graphed_callables: only a module's parameters may require grad, not buffers")
        leaves = tuple(pytree.arg_tree_leaves(*args))
        if not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
            raise TypeError("make_graphed_callables: sample_args may contain tensors only")
        flat_args.append(leaves)
    # What each graph reads: the arguments, then the module's parameters (whose gradients backward computes).
    surfaces = [args + (tuple(fn.parameters()) if isinstance(fn, torch.nn.Module) else ())
                for fn, args in zip(callables, flat_args)]
    pool = graph_pool_handle() if pool is None else pool

    def backward_of(outputs, grad_outputs, surface):
        needs_grad = [o for o in outputs if o.requires_grad]
        if not needs_grad:
            return None
        return torch.autograd.grad(needs_grad, [t for t in surface if t.requires_grad],
                                   grad_outputs=[g for g in grad_outputs if g is not None], only_inputs=True,
                                   allow_unused=allow_unused_input)

    # Warm-up on the stream the graphs are captured on: foo learns every operator's outputs, and autograd
    # creates the gradient accumulators of the inputs there (a backward that moved to another stream would
    # need an event, which a capture refuses).
    torch.foo.synchronize()
    capture_stream = graph.default_capture_stream(torch.foo.current_device())
    with torch.foo.stream(capture_stream):
        for fn, args, surface in zip(callables, sample_args, surfaces):
            for _ in range(num_warmup_iters):
                outputs = pytree.tree_leaves(fn(*args))
                # Zeros, not torch.cuda's empty_like: the values do not matter, but reading memory never written
                # is what the sanitizer's initialization check reports.
                backward_of(outputs, [torch.zeros_like(o) if o.requires_grad else None for o in outputs], surface)
    torch.foo.synchronize()

    forward_graphs, static_outputs, output_specs = [], [], []
    for fn, args in zip(callables, sample_args):
        forward_graph = FooGraph()
        with graph(forward_graph, pool=pool):
            outputs, spec = pytree.tree_flatten(fn(*args))
        forward_graphs.append(forward_graph)
        static_outputs.append(tuple(outputs))
        output_specs.append(spec)
    # Backward graphs in reverse order, as backward runs them.
    backward_graphs = [None] * len(callables)
    static_grad_outputs = [None] * len(callables)
    static_grad_inputs = [None] * len(callables)
    for i in reversed(range(len(callables))):
        grad_outputs = tuple(torch.empty_like(o) if o.requires_grad else None for o in static_outputs[i])
        backward_graph = FooGraph()
        grads = None
        if any(o.requires_grad for o in static_outputs[i]):
            with graph(backward_graph, pool=pool):
                grads = backward_of(static_outputs[i], grad_outputs, surfaces[i])
        grads_iter = iter(grads or ())
        static_grad_inputs[i] = tuple(next(grads_iter) if t.requires_grad and grads is not None else None
                                      for t in surfaces[i])
        backward_graphs[i], static_grad_outputs[i] = backward_graph, grad_outputs

    graphed = tuple(_graphed_callable(fn, forward_graphs[i], backward_graphs[i], len(flat_args[i]), surfaces[i],
                                      static_outputs[i], output_specs[i], static_grad_outputs[i], static_grad_inputs[i])
                    for i, fn in enumerate(callables))
    return graphed[0] if one_callable else graphed


def _fill(statics, values) -> None:
    """Copies each value into its static tensor (the one a graph reads), unless it is that tensor already."""
    for static, value in zip(statics, values):
        if static is not None and value is not None and static.data_ptr() != value.data_ptr():
            static.copy_(value)


def _graphed_callable(fn, forward_graph, backward_graph, num_args, surface, outputs, output_spec, grad_outputs,
                      grad_inputs) -> Callable:
    """The replaying callable of one graphed function or module (an autograd.Function around the graphs)."""

    class Graphed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            _fill(surface[:num_args], inputs[:num_args])
            forward_graph.replay()
            return tuple(o.detach() for o in outputs)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, *grads):
            _fill(grad_outputs, grads)
            backward_graph.replay()
            # Clones: the next replay overwrites the static gradients.
            return tuple(g.detach().clone() if g is not None else None for g in grad_inputs)

    def run(*args, **kwargs):
        flat = pytree.arg_tree_leaves(*args, **kwargs)
        return pytree.tree_unflatten(Graphed.apply(*(tuple(flat) + surface[num_args:])), output_spec)

    if isinstance(fn, torch.nn.Module):
        # Graphed while training; in eval mode (or any other state than at capture) the module runs eagerly.
        training = fn.training

        def forward(*args, **kwargs):
            return run(*args, **kwargs) if fn.training == training else fn.__class__.forward(fn, *args, **kwargs)

        fn.forward = forward
        return fn
    return run

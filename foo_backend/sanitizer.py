"""The foo sanitizer (``torch.foo.sanitizer``): finds races between streams and memory reused too early,
deterministically, at the call that causes them.

On a GPU a missing ``wait_stream`` or ``record_stream`` corrupts results only when timing happens to expose it.
foo's runtime sees every launch on every stream, so with the sanitizer on it checks each launch against what
other streams did to the same bytes: an access that conflicts with another stream's (one of them writes) and
that nothing orders (stream order, ``wait_stream``/``wait_event``, a synchronization, a host read) raises a
``RuntimeError`` at the offending call, naming both operators, their streams, the tensor and the Python stack
of both launches, as PyTorch's CUDA sanitizer (``TORCH_CUDA_SANITIZER=1``) reports them. Views and offsets into
one storage are distinct byte ranges. A block freed while another stream may still use it (no
``Tensor.record_stream``) is reported when an allocation reuses it. Memory the caching allocator hands out is
poisoned (filled with 0xFF bytes: NaN in floating dtypes). With ``check_initialization``, a launch that reads
bytes never written since their allocation is reported too, as compute-sanitizer's initcheck (a separate tool
there too: PyTorch itself reads such memory where the values do not matter, as ``torch.mv(..., out=)`` reads
its ``out`` through ``addmv`` with ``beta=0``; not checked: bytes the same launch writes, as an in-place
operator's, and reads of a non-contiguous view, whose span holds bytes it does not read).

Turn it on with ``FOO_SANITIZER=1`` in the environment (``warn`` warns instead of raising; ``initcheck``, alone or
after a comma, checks initialization too: ``FOO_SANITIZER=warn,initcheck``), or call :func:`enable` before the work
to check: it knows nothing of work launched before.
"""
import os

from ._utils import _C

__all__ = ["enable", "disable", "is_enabled"]


def enable(*, warn_only: bool = False, check_initialization: bool = False) -> None:
    """Turn the sanitizer on.

    Args:
        warn_only (bool): a hazard warns (``UserWarning``) and the call goes on, instead of raising
            ``RuntimeError`` and launching nothing.
        check_initialization (bool): also report a launch that reads device memory never written since its
            allocation.
    """
    _C._sanitizer_enable(bool(warn_only), bool(check_initialization))


def disable() -> None:
    """Turn the sanitizer off; it forgets what it knew."""
    _C._sanitizer_disable()


def is_enabled() -> bool:
    """Whether the sanitizer is on."""
    return _C._sanitizer_enabled()


def _enable_from_environment() -> None:
    setting = os.environ.get("FOO_SANITIZER", "")
    if setting in ("", "0"):
        return
    words = setting.split(",")
    if not set(words) <= {"1", "warn", "initcheck"}:
        raise ValueError(f"FOO_SANITIZER must be 0, or 1, warn or initcheck (or warn,initcheck), not {setting!r}")
    enable(warn_only="warn" in words, check_initialization="initcheck" in words)

"""Loads foo_backend._C, refusing clearly when it was built against another PyTorch."""
import importlib

import torch

from . import _releases

_REBUILD = "Rebuild foo_backend against the running torch: pip install --no-build-isolation -e <foo_backend checkout>"


def load():
    refusal = _releases.unsupported(torch.__version__)
    if refusal:
        raise ImportError(refusal)
    try:
        from ._build_info import TORCH_VERSION
    except ImportError as e:
        raise ImportError(f"foo_backend's native extension is not built. {_REBUILD}") from e
    if TORCH_VERSION != torch.__version__:
        raise ImportError(
            f"foo_backend was built against torch {TORCH_VERSION} but torch {torch.__version__} is running. {_REBUILD}"
        )
    try:
        return importlib.import_module("foo_backend._C")
    except ImportError as e:
        raise ImportError(f"foo_backend._C failed to load against torch {torch.__version__} ({e}). {_REBUILD}") from e

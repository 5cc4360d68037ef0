"""Loads foo_backend._C, refusing clearly when it was built against another PyTorch."""
import ctypes
import importlib
import os

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
        extension = importlib.import_module("foo_backend._C")
    except ImportError as e:
        raise ImportError(f"foo_backend._C failed to load against torch {torch.__version__} ({e}). {_REBUILD}") from e
    # C++ code Inductor generates for foo (cpp_wrapper, AOTInductor models) calls foo's C functions
    # (include/foo_backend/aoti.h) by name: Python loaded the device library with the extension, its symbols
    # private to them.
    ctypes.CDLL(os.path.join(os.path.dirname(extension.__file__), "lib", "libfoo_backend.so"),
                mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
    return extension

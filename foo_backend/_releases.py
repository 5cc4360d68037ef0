"""The PyTorch releases foo_backend supports, in one place: ``setup.py`` reads this file (before anything is
built, without importing the package) to refuse another torch and to choose the C++ standard; the package
reads it at import, to refuse running on another torch."""

# "major.minor" -> the C++ standard its headers need (2.14's use C++20).
CXX_STANDARD = {"2.13": "c++17", "2.14": "c++20"}
SUPPORTED = tuple(CXX_STANDARD)
# The torch each release is built and tested with (`make`'s installs; the wheels these machines hold).
TESTED_TORCH = {"2.13": "2.13.0", "2.14": "2.14.1"}
# What pip may install beside foo_backend: any supported release, never a replacement of the user's.
TORCH_REQUIREMENT = "torch>=2.13,<2.15"


def release_of(version: str) -> str:
    """``"major.minor"`` of a torch version string (``"2.13"`` for ``"2.13.0+cpu"``)."""
    return ".".join(version.split("+")[0].split(".")[:2])


def unsupported(version: str) -> str:
    """The message refusing torch ``version``, or "" when its release is supported."""
    if release_of(version) in SUPPORTED:
        return ""
    return (f"foo_backend supports torch {' and '.join(SUPPORTED)}, not torch {version}: install one of them "
            f"(pip install {' or '.join(f'torch=={v}' for v in TESTED_TORCH.values())}), then build foo_backend again")


def other_tested_torch(version: str) -> str:
    """The tested torch of the supported release that ``version`` is not of (``make test`` checks both)."""
    return next(v for release, v in TESTED_TORCH.items() if release != release_of(version))

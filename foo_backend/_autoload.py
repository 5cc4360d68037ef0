"""The ``torch.backends`` entry point that PyTorch's autoload calls during ``import torch``."""
import sys


def register() -> None:
    """Load and register foo.

    When ``import foo_backend`` came first, its ``import torch`` runs the autoload while the package is
    still half-initialised; its own import then finishes the registration, so there is nothing to do.
    """
    package = sys.modules.get("foo_backend")
    if package is not None and not hasattr(package, "_register"):
        return
    import foo_backend

    foo_backend._register()

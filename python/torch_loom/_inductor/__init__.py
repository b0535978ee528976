"""Inductor on loom: a plain ``torch.compile(model)`` on loom tensors.

Nothing here costs ``import torch`` anything: this module only installs an
import hook, and the work happens when torch.compile first loads Dynamo and
Inductor.

- Dynamo's device interface (``interface.py``) is registered once
  ``torch._dynamo.device_interface`` has been imported (by the first
  ``torch.compile``), before Dynamo traces anything: 2.13 offers no lazy
  registration of an interface for an out-of-tree device.
- Inductor's backend (``backend.py``) is registered once
  ``torch._inductor.compile_fx`` has been imported, before Inductor
  registers its backends: so loom's registration, which carries the codegen
  config Inductor hashes into its cache keys, is the one Inductor keeps.
  Inductor's own lazy hook, ``init_backend_registration`` reading
  ``torch.loom.Scheduling``, ``PythonWrapperCodegen``, ``CppWrapperCodegen``
  and ``WrapperFxCodegen``, is served too (``inductor_attr``), for code that
  reaches it without loading ``compile_fx`` first.
- PyTorch's fake convolution rule gives loom's convolutions the layout loom
  gives them (``fake_conv.py``) once ``torch._dynamo`` has been imported
  (by the first ``torch.compile`` or ``torch.export``), before Dynamo
  traces anything: traced graphs see the strides loom's ops return.
"""

from .._after_import import after_import

# The names Inductor's init_backend_registration reads from torch.loom.
BACKEND_NAMES = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


def inductor_attr(name: str):
    """torch.loom.<name> for the names in BACKEND_NAMES (imports backend.py,
    which registers loom with Inductor)."""
    from . import backend

    return backend.INDUCTOR_CLASSES[name]


def _register_interface(_module) -> None:
    from . import interface

    interface.register()


def _register_backend(_module) -> None:
    from . import backend  # noqa: F401  (registers on import)
    from .interface import run_stream_code_eagerly

    run_stream_code_eagerly()


def _register_fake_conv(_module) -> None:
    from . import fake_conv

    fake_conv.apply()


# module -> what to run once it has been imported
_HOOKS = {
    "torch._dynamo.device_interface": _register_interface,
    "torch._inductor.compile_fx": _register_backend,
    "torch._dynamo": _register_fake_conv,
}


def install() -> None:
    """Arranges for loom's registrations with Dynamo and Inductor to happen
    when those load (at once for what has loaded already)."""
    for name, callback in _HOOKS.items():
        after_import(name, callback, "registering loom with torch.compile")

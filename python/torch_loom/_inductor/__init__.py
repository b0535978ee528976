"""Inductor on loom: a plain ``torch.compile(model)`` on loom tensors.

Nothing here costs ``import torch`` anything: this module only installs two
hooks, and the work happens on first use.

- Dynamo's device interface (``interface.py``) is registered right after
  ``torch._dynamo.device_interface`` is first imported (by the first
  ``torch.compile``), before Dynamo traces anything: 2.13 offers no lazy
  registration for an out-of-tree device, so an import hook watches for
  that one module.
- Inductor's backend (``backend.py``) loads when Inductor first registers
  its backends: ``init_backend_registration`` reads ``torch.loom.Scheduling``,
  ``PythonWrapperCodegen``, ``CppWrapperCodegen`` and ``WrapperFxCodegen``,
  which the device module serves through ``inductor_attr``.
"""

from __future__ import annotations

import importlib.abc
import sys

_INTERFACE_MODULE = "torch._dynamo.device_interface"

# The names Inductor's init_backend_registration reads from torch.loom.
BACKEND_NAMES = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


def inductor_attr(name: str):
    """torch.loom.<name> for the names in BACKEND_NAMES (imports backend.py,
    which registers loom with Inductor)."""
    from . import backend

    return backend.INDUCTOR_CLASSES[name]


def _register_interface(_module=None) -> None:
    from . import interface

    interface.register()


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs `callback(module)` once `name` has been imported: finds the
    module with the finders after it, then executes it through its own
    loader and calls back. Removes itself on first use."""

    def __init__(self, name: str, callback):
        self.name, self.callback = name, callback
        self.loader = None

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        self.loader = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        module.__spec__.loader = self.loader
        module.__loader__ = self.loader
        try:
            self.callback(module)
        except Exception as exc:  # loom must never break `import torch._dynamo`
            import warnings

            warnings.warn(f"torch_loom: could not register loom with Dynamo ({exc}); "
                          "torch.compile will not handle loom tensors")


def install() -> None:
    """Arranges for the Dynamo device interface to be registered when Dynamo
    loads (at once if it already has)."""
    if _INTERFACE_MODULE in sys.modules:
        _register_interface()
        return
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(_INTERFACE_MODULE, _register_interface))

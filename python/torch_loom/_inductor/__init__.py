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
"""

import importlib.abc
import sys

# The names Inductor's init_backend_registration reads from torch.loom.
BACKEND_NAMES = ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen")


def inductor_attr(name: str):
    """torch.loom.<name> for the names in BACKEND_NAMES (imports backend.py,
    which registers loom with Inductor)."""
    from . import backend

    return backend.INDUCTOR_CLASSES[name]


def _register_interface() -> None:
    from . import interface

    interface.register()


def _register_backend() -> None:
    from . import backend  # noqa: F401  (registers on import)


# module -> what to run once it has been imported
_HOOKS = {
    "torch._dynamo.device_interface": _register_interface,
    "torch._inductor.compile_fx": _register_backend,
}


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs `callback()` once the module `name` has been imported: finds the
    module with the finders after it, executes it with its own loader, then
    calls back. Leaves sys.meta_path on first use."""

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
            self.callback()
        except Exception as exc:  # loom must never break importing torch's modules
            import warnings

            warnings.warn(f"torch_loom: could not register loom with torch.compile ({exc}); "
                          "torch.compile may not handle loom tensors")


def install() -> None:
    """Arranges for loom's registrations with Dynamo and Inductor to happen
    when those load (at once for what has loaded already)."""
    for name, callback in _HOOKS.items():
        if name in sys.modules:
            callback()
        elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
            sys.meta_path.insert(0, _AfterImport(name, callback))

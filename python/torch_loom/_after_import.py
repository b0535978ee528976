"""Run loom's registrations with torch's optional subsystems (Dynamo,
Inductor) when those load, so that ``import torch`` imports none of them.

:func:`after_import` installs a meta path finder that lets the finders
after it locate the module, executes it with its own loader, then calls
back; it leaves ``sys.meta_path`` on first use. A failing callback warns
instead of breaking the import of torch's module."""

import importlib.abc
import sys
import warnings


class _AfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, name: str, callback, what: str):
        self.name, self.callback, self.what = name, callback, what
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
        self.loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        module.__spec__.loader = module.__loader__ = self.loader
        try:
            self.callback(module)
        except Exception as exc:  # loom must never break importing torch's modules
            warnings.warn(f"torch_loom: {self.what} failed: {exc}")


def after_import(name: str, callback, what: str) -> None:
    """Calls ``callback(module)`` once the module ``name`` is imported (at
    once if it already is). ``what`` names the registration in the warning
    a failure gives. Installing the same module's hook twice is a no-op."""
    module = sys.modules.get(name)
    if module is not None:
        callback(module)
    elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, callback, what))

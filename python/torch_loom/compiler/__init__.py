"""loom's compiler stack (DESIGN.md, "The compiler stack").

- ``jit``: C source compiled at run time by the system C compiler into
  kernels of loom's registry, with an on-disk cache; shared by every user of
  compiled kernels (the ``loom`` compile backend, adaptive eager, the kernel
  interface).
- The fusion IR (``ir``), the lowering from ATen graphs (``lower``, ``ops``,
  ``decomp``), fusion (``fuse``, ``loops``), the emitters (``emit`` and its C
  dialect ``emit_c``) and the program that runs a compiled graph
  (``program``): ``torch.compile(model, backend="loom")`` (``backend``).
  None of these load before the first compile.

:func:`counters` and ``LOOM_COMPILE_LOG`` tell what the compiler did
(``observe``).
"""

from . import jit

__all__ = ["jit", "counters", "reset_counters"]


def counters() -> dict:
    """The loom compiler's counters (see torch_loom.compiler.observe.counters)."""
    from . import observe

    return observe.counters()


def reset_counters() -> None:
    """Zeroes :func:`counters`."""
    from . import observe

    observe.reset_counters()


# ---- registration with Dynamo ----------------------------------------------------

_REGISTRY = "torch._dynamo.backends.registry"


def _loom(gm, example_inputs, **kwargs):
    """The ``"loom"`` backend, imported on first use."""
    from .backend import loom_backend

    return loom_backend(gm, example_inputs, **kwargs)


_loom.__name__ = "loom"


def _register_backend(registry) -> None:
    if "loom" not in registry._COMPILER_FNS:
        registry.register_backend(compiler_fn=_loom, name="loom")


class _AfterImport:
    """A meta path finder that runs `callback(module)` once `name` is
    imported (then leaves sys.meta_path): Dynamo's registry, imported by
    the first torch.compile, learns the ``"loom"`` backend without
    ``import torch`` importing Dynamo."""

    def __init__(self, name, callback):
        self.name, self.callback, self.loader = name, callback, None

    def find_spec(self, fullname, path, target=None):
        import sys

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
        except Exception as exc:  # never break `import torch._dynamo`
            import warnings

            warnings.warn(f"torch_loom: registering the 'loom' compile backend failed: {exc}")


def install() -> None:
    """Makes ``torch.compile(backend="loom")`` work: registers the backend
    now if Dynamo's registry is loaded, else when it loads. (An installed
    torch_loom also declares it as a ``torch_dynamo_backends`` entry point.)"""
    import sys

    registry = sys.modules.get(_REGISTRY)
    if registry is not None:
        _register_backend(registry)
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(_REGISTRY, _register_backend))

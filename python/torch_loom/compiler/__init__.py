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


def install() -> None:
    """Makes ``torch.compile(backend="loom")`` work: registers the backend
    now if Dynamo's registry is loaded, else when it loads. (An installed
    torch_loom also declares it as a ``torch_dynamo_backends`` entry point.)"""
    from .._after_import import after_import

    after_import(_REGISTRY, _register_backend, "registering the 'loom' compile backend")

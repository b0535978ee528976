"""loom's compiler stack (DESIGN.md, "The compiler stack").

``jit``: C source compiled at run time by the system C compiler into kernels
of loom's registry, with an on-disk cache; shared by every user of compiled
kernels (the ``loom`` compile backend, adaptive eager, the kernel
interface). The fusion IR and the C emitter join this package beside it.
"""

from . import jit

__all__ = ["jit"]

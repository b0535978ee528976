"""The configuration of loom's Inductor backend, registered with Inductor
as the device's codegen config: Inductor hashes it into the keys of its
caches (the FX graph cache), so a graph compiled and cached by one version
of these code generators is never loaded by another."""

import hashlib
import os
import sys

from torch.utils._config_module import install_config_module

_SOURCES = ("__init__.py", "backend.py", "batchnorm.py", "cpp_kernels.py", "epilogue.py", "fake_conv.py",
            "interface.py", "library_ops.py", "patches.py", "runtime.py")


def _digest() -> str:
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in _SOURCES:
        with open(os.path.join(here, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:32]


#: Attention in loom graphs reads its row operands (query, key, value; in
#: the backward also the output and its gradient) contiguous, written by
#: generated copy kernels, instead of copying strided views itself on every
#: call (library_ops.py).
sdpa_contiguous_rows: bool = True

#: Linear layers' activations (and their gradients) run inside the GEMM
#: as its epilogue (epilogue.py). Off: side by side on a quiet machine the
#: epilogue GEMMs took more time than the plain GEMMs and the generated
#: activation kernels together (bench mlp_train about 0.8 ms a step,
#: gpt_train's GELU layers about 10 ms).
gemm_epilogues: bool = False

#: Batch norm in training (forward and backward) runs as the library's
#: kernels instead of Inductor's decomposition (library_ops.py).
batch_norm_library: bool = True

#: Batch norms take the ReLU after them (and a residual added before it)
#: into one library call, and their backward the ReLU's gradient
#: (batchnorm.py; with batch_norm_library on).
batch_norm_relu: bool = True

def _abi_include() -> str:
    """The #include lines every generated kernel begins with
    (cpp_kernels.py): loom's ABI headers by absolute path, then a digest of
    their contents; empty when the headers are missing (the kernels' code
    generator then refuses, naming them)."""
    from ..compiler.jit import CompileError, include_dir

    try:
        root = os.path.join(os.path.realpath(include_dir()), "loom")
    except CompileError:
        return ""
    digest = hashlib.sha256()
    lines = []
    for name in ("status.h", "kernel_abi.h"):
        path = os.path.join(root, name)
        with open(path, "rb") as f:
            digest.update(f.read())
        lines.append(f'#include "{path}"')
    lines.append(f"// loom ABI headers: sha256 {digest.hexdigest()}")
    return "\n".join(lines)


#: The code generators' identity (a digest of their sources).
codegen_version: str = _digest()

#: The generated kernels' #include lines: the headers' absolute path and a
#: digest of them. In the cache keys with the rest of this module, so a
#: graph cached by another installation (another path, other headers) is
#: compiled again, not loaded with includes that point elsewhere.
abi_include: str = _abi_include()

install_config_module(sys.modules[__name__])

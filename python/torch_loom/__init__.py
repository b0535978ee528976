"""torch_loom: the loom accelerator as a native PyTorch device.

``import torch`` loads this package through the ``torch.backends`` entry
point (unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``; then ``import torch_loom``
does the same). Importing it names the PrivateUse1 device ``loom``, adds the
``.loom()`` methods to tensors, modules and storages, and attaches the
device module ``torch.loom``.
"""

import warnings


def _autoload():
    """Entry point of the ``torch.backends`` group, run by ``import torch``.

    Importing this package registers the device. Defined before ``import
    torch`` because ``import torch_loom`` on its own starts torch's
    autoload while this module is still half initialised."""


import torch  # noqa: E402

try:
    from . import _C  # noqa: F401  (registers the device's C++ hooks)
except ImportError as _error:  # the extension is not built: `make build`
    _C = None
    warnings.warn(f"torch_loom: the native extension could not be loaded ({_error}); the loom device is unavailable. Run `make build`.")

__all__ = ["loom"]


def _register():
    if torch._C._get_privateuse1_backend_name() != "loom":
        torch.utils.rename_privateuse1_backend("loom")
    if getattr(torch, "loom", None) is not _device_module:
        torch._register_device_module("loom", _device_module)
    if not hasattr(torch.Tensor, "is_loom"):
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)
    _device_module.amp._set_default_dtype()
    _inductor.install()  # torch.compile on loom tensors, registered on first use
    distributed.install()  # the "loomccl" backend of torch.distributed
    compiler.install()  # torch.compile(backend="loom"), registered when Dynamo loads


if _C is not None:
    from . import _inductor, compiler, distributed
    from . import loom as _device_module

    loom = _device_module
    _register()


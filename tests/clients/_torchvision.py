"""Importing torchvision (which timm needs, and transformers imports when it
is installed) where its native library cannot load.

The torchvision wheel on PyPI that goes with torch 2.13 links the CUDA
builds of libtorch, so on this CPU build of torch its native operators do not
load. Its Python modules work without them, as torchvision intends
(`torchvision.extension._has_ops()` is then False), except that two fake
(meta) registrations name `torchvision::nms` and `torchvision::qnms`
unconditionally. Defining those two schemas, with no kernel, lets the import
finish; calling either op still raises. The client models never call them.
"""
import ctypes
import importlib.util
import os

import torch

_lib = None


def _native_library_loads():
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return True      # not installed: let the import raise as usual
    folder = spec.submodule_search_locations[0]
    names = [n for n in os.listdir(folder) if n.startswith("_C") and n.endswith(".so")]
    if not names:
        return False
    try:
        ctypes.CDLL(os.path.join(folder, names[0]))
    except OSError:
        return False
    return True


def allow_import():
    """Defines torchvision's two missing schemas when its native library
    cannot load; does nothing otherwise."""
    global _lib
    if _lib is None and not _native_library_loads():
        _lib = torch.library.Library("torchvision", "DEF")
        _lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        _lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")

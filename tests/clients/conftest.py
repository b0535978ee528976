"""The client-model tests import transformers and timm, which import
torchvision: make that import work here first (see _torchvision.py)."""
from ._torchvision import allow_import

allow_import()

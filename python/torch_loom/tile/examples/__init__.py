"""Kernels written with torch_loom.tile, each wrapped as an operator
(``torch.ops.loom_tile.*``) usable in eager, under torch.compile and with
autograd. Importing a module registers its operator."""

/* loom/kernels/random.h — the random number kernels' names and argument
 * contracts: counter-based draws (Philox-4x32-10). Every driver provides
 * these names, with the same bits.
 *
 * Element i of the output (row-major over its logical shape) draws from
 * the Philox block with key = seed and counter = offset + i / k, where k
 * elements share a block's four words (k = 4 for narrow uniforms, 2 for
 * float64 uniforms and normal pairs, else 1). A result depends only on
 * (seed, offset, i): never on the thread count or on the chunking. The
 * caller advances its generator's offset by numel (an upper bound on the
 * blocks used) after each launch.
 *
 * Common scalars: scalars[0].u = seed, scalars[1].u = offset. tensors[0] is
 * the output (any strides; dtypes as listed). Range = numel(out); grain
 * LOOM_RANDOM_GRAIN.
 *
 * State read at run time (graph capture): a launch given one tensor more
 * than its kernel lists below takes that last tensor as a state cell, two
 * int64 elements (contiguous or not) [seed, base]: the kernel then draws
 * with seed = cell[0] and offset = cell[1] + scalars[1].u, ignoring
 * scalars[0]. A replayed graph thus draws from what the cell holds when
 * the launch runs.
 *
 * "random.uniform": uniform on [from, to): scalars[2].f = from,
 * scalars[3].f = to. Floating out. float64 uses 53 random bits, narrower
 * types 24.
 *
 * "random.normal": normal (Box-Muller): scalars[2].f = mean,
 * scalars[3].f = std. Floating out.
 *
 * "random.integers": integers uniform on [from, from + range):
 * scalars[2].i = from, scalars[3].u = range (0 means 2^64). Any real out
 * dtype.
 *
 * "random.bernoulli": 1 with probability p, else 0: scalars[2].f = p. Any
 * real out dtype.
 *
 * "random.bernoulli_tensor": as "random.bernoulli" with per-element p from
 * tensors[1] (floating, out's sizes, stride 0 where it broadcasts).
 *
 * "random.exponential": exponential with rate scalars[2].f (> 0). Floating
 * out. */
#ifndef LOOM_KERNELS_RANDOM_CONTRACT_H
#define LOOM_KERNELS_RANDOM_CONTRACT_H

#define LOOM_RANDOM_GRAIN 16384

#endif /* LOOM_KERNELS_RANDOM_CONTRACT_H */

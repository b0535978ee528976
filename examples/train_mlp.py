"""Train a small MLP on synthetic data on the loom device.

Run with `make demo`. Prints the loss as it falls, the training speed, and
which operators ran through the CPU fallback (ideally none).
"""

import argparse
import time

import torch
from torch import nn


def make_data(n, dim, classes, generator):
    # Points around one random centre per class: learnable, not trivial.
    centres = torch.randn(classes, dim, generator=generator) * 0.25
    labels = torch.randint(0, classes, (n,), generator=generator)
    points = centres[labels] + torch.randn(n, dim, generator=generator)
    return points, labels


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--device", default="loom")
    parser.add_argument("--amp", choices=["none", "bf16"], default="none",
                        help="autocast dtype for the forward pass (default: none, float32)")
    args = parser.parse_args()
    amp = torch.bfloat16 if args.amp == "bf16" else None

    device = torch.device(args.device)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x_all, y_all = make_data(16384, args.dim, args.classes, gen)
    x_all, y_all = x_all.to(device), y_all.to(device)

    model = nn.Sequential(
        nn.Linear(args.dim, args.hidden),
        nn.ReLU(),
        nn.Dropout(0.1),
        nn.Linear(args.hidden, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, args.classes),
    ).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    print(f"training on {device} ({torch.loom.get_device_name() if device.type == 'loom' else 'cpu'})"
          + (", bf16 autocast" if amp else ""))
    start = None
    for step in range(args.steps + 1):
        if step == 5:  # the first steps include one-off set-up costs
            if device.type == "loom":
                torch.loom.synchronize()
            start = time.perf_counter()
        idx = torch.randint(0, x_all.shape[0], (args.batch,), device=device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp is not None):
            logits = model(x_all[idx])
            loss = loss_fn(logits, y_all[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step:4d}  loss {loss.item():.4f}")
    if device.type == "loom":
        torch.loom.synchronize()
    elapsed = time.perf_counter() - start
    print(f"{(args.steps - 5) / elapsed:.1f} steps/s ({args.batch} samples per step)")

    model.eval()
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp is not None):
        acc = (model(x_all).argmax(1) == y_all).float().mean().item()
    print(f"accuracy on the training set: {acc:.3f}")
    if device.type == "loom":
        ops = torch.loom.fallback_ops()
        if ops:
            print("ops that ran on the CPU fallback:")
            for name, count in sorted(ops.items(), key=lambda kv: -kv[1]):
                print(f"  {name}: {count}")
        else:
            print("no op ran on the CPU fallback")


if __name__ == "__main__":
    main()

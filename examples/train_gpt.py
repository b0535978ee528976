"""Train a character-level GPT on Hamlet, on the loom device.

Run with `make demo`. Trains for a fixed number of steps with a progress bar
(loss, tokens/s), prints the held-out loss before and after, times the same
training step on CPU eager for comparison, and prints text sampled from the
trained model. Every op must run natively on loom: `make demo` sets
LOOM_FALLBACK=error, and the ops that went through the CPU fallback (none,
ideally) are listed at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

import gpt

AMP = {"none": None, "bf16": torch.bfloat16}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="loom", help="device to train on (default: loom)")
    p.add_argument("--steps", type=int, default=300, help="training steps (default: 300)")
    p.add_argument("--batch-size", type=int, default=16, help="sequences per step (default: 16)")
    p.add_argument("--context", type=int, default=128, help="characters per sequence (default: 128)")
    p.add_argument("--layers", type=int, default=4, help="transformer blocks (default: 4)")
    p.add_argument("--width", type=int, default=256, help="model width d_model (default: 256)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default: 4)")
    p.add_argument("--lr", type=float, default=3e-3,
                   help="peak AdamW learning rate, after a warm-up, before a cosine decay (default: 3e-3)")
    p.add_argument("--amp", choices=sorted(AMP), default="none",
                   help="autocast dtype for the forward pass (default: none, float32)")
    p.add_argument("--compile", action="store_true", help="train torch.compile(model)")
    p.add_argument("--no-cpu-compare", action="store_true",
                   help="skip timing the same step on CPU eager")
    p.add_argument("--sample-chars", type=int, default=400,
                   help="characters of text to generate at the end (default: 400)")
    p.add_argument("--prompt", default="Ham.\n", help="text the sample starts from")
    p.add_argument("--temperature", type=float, default=0.8,
                   help="sampling temperature; 0 picks the most likely character (default: 0.8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights, batches and sampling")
    p.add_argument("--text", default=str(gpt.TEXT), help="the text to train on")
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "context", "layers", "width", "heads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.width % args.heads:
        p.error("--width must be a multiple of --heads")
    return args


def synchronize(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


class ProgressBar:
    """One line that redraws itself on a terminal; elsewhere (a pipe, a
    log) a line every tenth of the run."""

    def __init__(self, total: int, width: int = 30, stream=sys.stdout):
        self.total, self.width, self.stream = total, width, stream
        self.tty = stream.isatty()
        self.start = time.perf_counter()
        self.logged = -1

    def update(self, done: int, info: str) -> None:
        frac = done / self.total
        filled = int(round(frac * self.width))
        elapsed = time.perf_counter() - self.start
        eta = elapsed / done * (self.total - done) if done else 0.0
        line = (f"{done:>{len(str(self.total))}}/{self.total} |{'#' * filled}{'.' * (self.width - filled)}| "
                f"{100 * frac:3.0f}% {info}  [{_clock(elapsed)}<{_clock(eta)}]")
        if self.tty:
            self.stream.write("\r" + line)
        elif int(10 * frac) > self.logged or done == self.total:
            self.logged = int(10 * frac)
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}:{s:02d}"


def train(model, opt, data, args, device, amp, bar: ProgressBar | None = None,
          warmup: int = 3) -> dict:
    """`args.steps` training steps on batches drawn from `data` with
    `args.seed`. The bar shows the mean loss and the tokens/s since its
    last refresh; the returned tokens_per_s counts the steps after the
    first `warmup` (which include one-off set-up costs)."""
    gen = torch.Generator().manual_seed(args.seed)
    tokens = args.batch_size * args.context
    lr_warmup = max(1, min(30, args.steps // 10))
    every = max(1, min(10, args.steps // 20))
    running = torch.zeros((), device=device)
    since, t_last = 0, time.perf_counter()
    t_start = None
    first = last = None
    for step in range(args.steps):
        if step == min(warmup, args.steps - 1):
            synchronize(device)
            t_start, start_step = time.perf_counter(), step
        x, y = gpt.get_batch(data, args.batch_size, args.context, gen)
        gpt.set_lr(opt, args.lr, step, args.steps, lr_warmup)
        loss = gpt.train_step(model, opt, x.to(device), y.to(device), amp)
        if first is None:
            first = loss.item()
        running += loss
        since += 1
        if (step + 1) % every == 0 or step + 1 == args.steps:
            mean = running.item() / since  # waits for the device
            now = time.perf_counter()
            last = mean
            if bar is not None:
                bar.update(step + 1, f"loss {mean:.4f}  {since * tokens / (now - t_last):8.0f} tok/s")
            running.zero_()
            since, t_last = 0, now
    synchronize(device)
    elapsed = time.perf_counter() - t_start
    return {"first_loss": first, "last_loss": last,
            "tokens_per_s": (args.steps - start_step) * tokens / elapsed}


def time_steps(model, opt, data, args, device, amp, warmup: int = 3, steps: int = 5) -> float:
    """Tokens/s of the training step on `device`: `warmup` steps, then
    `steps` timed ones, on the same kind of batches as training."""
    gen = torch.Generator().manual_seed(args.seed)
    batches = [gpt.get_batch(data, args.batch_size, args.context, gen) for _ in range(warmup + steps)]
    for x, y in batches[:warmup]:
        gpt.train_step(model, opt, x.to(device), y.to(device), amp)
    synchronize(device)
    t0 = time.perf_counter()
    for x, y in batches[warmup:]:
        gpt.train_step(model, opt, x.to(device), y.to(device), amp)
    synchronize(device)
    return steps * args.batch_size * args.context / (time.perf_counter() - t0)


def describe_failure(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]


def main(argv=None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    amp = AMP[args.amp]
    corpus = gpt.CharCorpus.load(args.text)
    train_data, val_data = corpus.split(0.9)
    cfg = gpt.ModelConfig(n_layer=args.layers, d_model=args.width, n_head=args.heads,
                          context=args.context)
    if device.type == "loom":
        torch.loom.clear_fallback_ops()
        name = torch.loom.get_device_name(device)
    else:
        name = device.type
    model = gpt.make_model(corpus.vocab_size, cfg, device, seed=args.seed)
    opt = gpt.make_optimizer(model, lr=args.lr)
    precision = "bf16 autocast" if amp else "float32"
    print(f"text: {Path(args.text).name}, {len(corpus.data):,} characters, vocabulary {corpus.vocab_size}")
    print(f"model: GPT, {args.layers} layers, width {args.width}, {args.heads} heads, context "
          f"{args.context}, {sum(p.numel() for p in model.parameters()):,} parameters")
    print(f"training on {device} ({name}), {precision}{', torch.compile' if args.compile else ''}: "
          f"{args.steps} steps of {args.batch_size} x {args.context} characters, AdamW, peak lr {args.lr}")

    eval_batches = 4
    val_before = gpt.evaluate(model, val_data, args.batch_size, args.context, eval_batches, amp=amp)
    step_model = torch.compile(model) if args.compile else model
    bar = ProgressBar(args.steps)
    try:
        stats = train(step_model, opt, train_data, args, device, amp, bar)
    except Exception as exc:
        if args.compile and device.type != "cpu":
            bar.close()
            print(f"torch.compile on {device.type} is not yet available: {describe_failure(exc)}")
            return 2
        raise
    bar.close()
    val_after = gpt.evaluate(model, val_data, args.batch_size, args.context, eval_batches, amp=amp)
    print(f"training loss: {stats['first_loss']:.4f} at the first step -> {stats['last_loss']:.4f} "
          f"(mean of the last steps)")
    print(f"held-out loss: {val_before:.4f} -> {val_after:.4f}")
    print(f"training speed on {device.type}: {stats['tokens_per_s']:,.0f} tokens/s")

    if args.no_cpu_compare:
        pass
    elif device.type == "cpu" and not args.compile:
        print("CPU eager comparison skipped: training ran on CPU eager already")
    else:
        # Both measured the same way, back to back, on fresh copies of the
        # initial model (the trained one is kept for the sample).
        def rate(dev, compiled):
            m = gpt.make_model(corpus.vocab_size, cfg, dev, seed=args.seed)
            o = gpt.make_optimizer(m, lr=args.lr)
            return time_steps(torch.compile(m) if compiled else m, o, train_data, args, dev, amp)

        label = f"{device.type}{' compiled' if args.compile else ''}"
        dev_rate = rate(device, args.compile)
        cpu_rate = rate(torch.device("cpu"), False)
        print(f"same step timed back to back ({precision}, {args.batch_size} x {args.context}): "
              f"{label} {dev_rate:,.0f} tokens/s, CPU eager {cpu_rate:,.0f} tokens/s; "
              f"{label} / CPU eager = {dev_rate / cpu_rate:.2f}x")

    if args.sample_chars > 0:
        start = time.perf_counter()
        out = gpt.generate(model, corpus.encode(args.prompt), args.sample_chars,
                           temperature=args.temperature, seed=args.seed)
        took = time.perf_counter() - start
        print(f"\nsample ({args.sample_chars} characters, temperature {args.temperature}, seed {args.seed}, "
              f"{took:.1f} s):\n{'-' * 60}\n{args.prompt}{corpus.decode(out)}\n{'-' * 60}")

    if device.type == "loom":
        ops = torch.loom.fallback_ops()
        if ops:
            print("ops that ran on the CPU fallback:")
            for op, count in sorted(ops.items(), key=lambda kv: -kv[1]):
                print(f"  {op}: {count}")
        else:
            print("no op ran on the CPU fallback")
    return 0


if __name__ == "__main__":
    sys.exit(main())

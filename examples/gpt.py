"""A character-level GPT on a text: the corpus, batches, the training step,
evaluation and sampling. examples/train_gpt.py is the command line around it.

The model is bench.models.GPT (a pre-norm decoder: token and position
embeddings, causal scaled_dot_product_attention, GELU MLP, tied output head),
the same class the benchmarks time, so `make bench`'s GPT training workloads
measure this model's step.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from examples/
    sys.path.insert(0, str(ROOT))

from bench.models import GPT, GPTConfig  # noqa: E402

TEXT = Path(__file__).resolve().parent / "data" / "hamlet.txt"


class CharCorpus:
    """A text as token ids, one id per distinct character (sorted)."""

    def __init__(self, text: str):
        if len(text) < 2:
            raise ValueError("CharCorpus: the text needs at least two characters")
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}
        self.data = torch.tensor([self.index[c] for c in text], dtype=torch.long)

    @classmethod
    def load(cls, path: Path | str = TEXT) -> "CharCorpus":
        return cls(Path(path).read_text(encoding="utf-8"))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - set(self.index))
        if unknown:
            raise ValueError(f"CharCorpus.encode: characters not in the corpus: {unknown}")
        return [self.index[c] for c in text]

    def decode(self, ids) -> str:
        return "".join(self.chars[i] for i in ids)

    def split(self, train_fraction: float = 0.9) -> tuple[torch.Tensor, torch.Tensor]:
        """The first `train_fraction` of the text for training, the rest held out."""
        n = int(len(self.data) * train_fraction)
        return self.data[:n], self.data[n:]


def get_batch(data: torch.Tensor, batch_size: int, context: int,
              generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch_size` random windows of `context` tokens and, for each
    position, the next token: (inputs, targets), both [batch_size, context]
    on the CPU. The windows come from `generator`, so every device trains
    on the same batches."""
    if len(data) < context + 1:
        raise ValueError(f"get_batch: {len(data)} tokens are fewer than context + 1 = {context + 1}")
    starts = torch.randint(0, len(data) - context, (batch_size,), generator=generator)
    rows = data[starts.unsqueeze(1) + torch.arange(context + 1)]
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


@dataclass
class ModelConfig:
    n_layer: int = 4
    d_model: int = 256
    n_head: int = 4
    context: int = 128

    def gpt(self, vocab_size: int) -> GPTConfig:
        return GPTConfig(vocab_size=vocab_size, max_seq=self.context, n_layer=self.n_layer,
                         n_head=self.n_head, d_model=self.d_model)


def make_model(vocab_size: int, cfg: ModelConfig, device, seed: int = 0) -> GPT:
    """A GPT initialised from `seed` (on the CPU, whatever `device`, so every
    device starts from the same weights) and moved to `device`. The global
    RNG state is left as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT(cfg.gpt(vocab_size))
    return model.to(device)


def make_optimizer(model: GPT, lr: float = 1e-3, weight_decay: float = 0.1) -> torch.optim.AdamW:
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=weight_decay)


def set_lr(opt, base_lr: float, step: int, total: int, warmup: int) -> float:
    """The learning rate of `step` (0-based) of `total`: a linear warm-up
    over `warmup` steps, then a cosine decay to a tenth of `base_lr`."""
    if step < warmup:
        lr = base_lr * (step + 1) / warmup
    else:
        progress = (step - warmup) / max(1, total - warmup)
        lr = base_lr * (0.1 + 0.45 * (1 + math.cos(math.pi * progress)))
    for group in opt.param_groups:
        group["lr"] = lr
    return lr


def train_step(model, opt, x: torch.Tensor, y: torch.Tensor, amp: torch.dtype | None = None) -> torch.Tensor:
    """One step of next-character prediction: forward (under autocast to
    `amp` when given), backward, AdamW. Returns the loss, detached, without
    waiting for the device."""
    opt.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=amp or torch.bfloat16, enabled=amp is not None):
        _, loss = model(x, y)
    loss.backward()
    opt.step()
    return loss.detach()


@torch.no_grad()
def evaluate(model, data: torch.Tensor, batch_size: int, context: int, batches: int,
             seed: int = 1234, amp: torch.dtype | None = None) -> float:
    """Mean loss over `batches` batches drawn from `data` with a fixed seed
    (the same batches at every call)."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    total = torch.zeros((), device=device)
    for _ in range(batches):
        x, y = get_batch(data, batch_size, context, gen)
        with torch.autocast(device.type, dtype=amp or torch.bfloat16, enabled=amp is not None):
            _, loss = model(x.to(device), y.to(device))
        total += loss.float()
    model.train(was_training)
    return total.item() / batches


@torch.no_grad()
def generate(model, prompt: list[int], new_tokens: int, temperature: float = 0.8,
             seed: int = 0) -> list[int]:
    """Samples `new_tokens` tokens after `prompt`, one at a time, each from
    the softmax of the last position's logits over at most the model's
    context (no key/value cache: every step runs the whole window).
    temperature 0 picks the most likely token. Sampling draws from a
    generator on the model's device seeded with `seed`. Returns the new
    tokens."""
    if not prompt:
        raise ValueError("generate: the prompt needs at least one token")
    if new_tokens < 0:
        raise ValueError(f"generate: new_tokens must be >= 0, got {new_tokens}")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    context = model.cfg.max_seq
    gen = torch.Generator(device=device).manual_seed(seed)
    idx = torch.tensor([prompt], dtype=torch.long, device=device)
    for _ in range(new_tokens):
        logits = model(idx[:, -context:])[:, -1, :]
        if temperature > 0:
            probs = torch.softmax(logits / temperature, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=gen)
        else:
            nxt = logits.argmax(dim=-1, keepdim=True)
        idx = torch.cat([idx, nxt], dim=1)
    model.train(was_training)
    return idx[0, len(prompt):].tolist()

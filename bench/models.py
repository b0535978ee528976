"""Small models for benchmarks and examples: a GPT, a ResNet-style CNN, an MLP.

The GPT is a standard pre-norm decoder (token + position embeddings, causal
self-attention through scaled_dot_product_attention, GELU MLP, tied output
head). Inference uses a static key/value cache: buffers sized for the longest
sequence, written in place at the positions given as a tensor, with a boolean
mask over the whole buffer. Every decode step therefore has the same shapes,
so a compiled decode step is compiled once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 2048
    max_seq: int = 640
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 256
    mlp_ratio: int = 4

    @staticmethod
    def tiny() -> "GPTConfig":
        return GPTConfig(vocab_size=128, max_seq=32, n_layer=2, n_head=2, d_model=32)


class KVCache(nn.Module):
    """Keys and values of one attention layer for `max_seq` positions."""

    def __init__(self, batch: int, n_head: int, max_seq: int, head_dim: int,
                 device=None, dtype=None):
        super().__init__()
        shape = (batch, n_head, max_seq, head_dim)
        self.register_buffer("k", torch.zeros(shape, device=device, dtype=dtype), persistent=False)
        self.register_buffer("v", torch.zeros(shape, device=device, dtype=dtype), persistent=False)

    def update(self, pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        self.k.index_copy_(2, pos, k)
        self.v.index_copy_(2, pos, v)
        return self.k, self.v


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.head_dim = cfg.d_model // cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.cache: KVCache | None = None

    def forward(self, x: torch.Tensor, pos: torch.Tensor | None = None,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.n_head, self.head_dim).transpose(1, 2)
        if pos is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            k, v = self.cache.update(pos, k, v)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.transpose(1, 2).reshape(b, t, c)
        return self.proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.proj = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x, pos=None, mask=None):
        x = x + self.attn(self.ln1(x), pos, mask)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.max_seq, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.head.weight = self.wte.weight
        self.apply(self._init_weights)
        # GPT-2's scaled init of residual projections keeps activations tame
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, mean=0.0, std=0.02)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        """Training/scoring path: full causal attention over `idx` [B, T].
        Returns logits [B, T, V], and the mean cross-entropy if `targets`."""
        t = idx.shape[1]
        positions = torch.arange(t, device=idx.device)
        x = self.wte(idx) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss

    # ---- inference with a key/value cache ---------------------------------

    def setup_cache(self, batch: int, device=None, dtype=None):
        head_dim = self.cfg.d_model // self.cfg.n_head
        device = device if device is not None else self.wte.weight.device
        dtype = dtype if dtype is not None else self.wte.weight.dtype
        for block in self.blocks:
            block.attn.cache = KVCache(batch, self.cfg.n_head, self.cfg.max_seq, head_dim,
                                       device=device, dtype=dtype)

    def reset_cache(self):
        for block in self.blocks:
            block.attn.cache.k.zero_()
            block.attn.cache.v.zero_()

    def forward_cached(self, idx: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """Runs tokens `idx` [B, T] at absolute positions `pos` [T] (int64),
        appending their keys/values to the cache. Returns logits [B, T, V]."""
        x = self.wte(idx) + self.wpe(pos)
        slots = torch.arange(self.cfg.max_seq, device=idx.device)
        mask = slots.unsqueeze(0) <= pos.unsqueeze(1)  # [T, max_seq]
        for block in self.blocks:
            x = block(x, pos, mask)
        return self.head(self.ln_f(x))


@torch.no_grad()
def generate(model: GPT, prompt: torch.Tensor, new_tokens: int, prefill=None, decode=None):
    """Greedy generation: one prefill over `prompt` [B, T], then `new_tokens`
    single-token decode steps through the cache. `prefill`/`decode` default to
    model.forward_cached (pass compiled versions to compile each phase).
    Returns (generated tokens [B, new_tokens], prefill logits)."""
    prefill = prefill or model.forward_cached
    decode = decode or model.forward_cached
    b, t = prompt.shape
    if t + new_tokens > model.cfg.max_seq:
        raise ValueError(f"generate: {t} + {new_tokens} tokens exceed max_seq={model.cfg.max_seq}")
    device = prompt.device
    positions = torch.arange(t + new_tokens, device=device)
    logits = prefill(prompt, positions[:t])
    first_logits = logits
    token = logits[:, -1, :].argmax(dim=-1, keepdim=True)
    out = [token]
    for i in range(new_tokens - 1):
        logits = decode(token, positions[t + i:t + i + 1])
        token = logits[:, -1, :].argmax(dim=-1, keepdim=True)
        out.append(token)
    return torch.cat(out, dim=1), first_logits


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 convolutions with batch norm, identity or
    1x1-projection shortcut."""

    def __init__(self, cin: int, cout: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.short is None else self.short(x)))


class SmallResNet(nn.Module):
    """A CIFAR-style ResNet: stem, three stages (width, 2x, 4x), pooling, linear."""

    def __init__(self, width: int = 32, num_classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        self.stages = nn.Sequential(
            BasicBlock(width, width),
            BasicBlock(width, 2 * width, stride=2),
            BasicBlock(2 * width, 4 * width, stride=2),
        )
        self.fc = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        x = self.stages(self.stem(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class MLPNet(nn.Module):
    def __init__(self, d_in: int = 1024, hidden: int = 1024, depth: int = 3, num_classes: int = 10):
        super().__init__()
        layers = []
        d = d_in
        for _ in range(depth):
            layers += [nn.Linear(d, hidden), nn.ReLU()]
            d = hidden
        layers.append(nn.Linear(d, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)

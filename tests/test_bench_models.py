"""The benchmark models compute what they claim: the cached inference path
of the GPT agrees with its full forward pass, generation is greedy decoding,
and the training models learn."""

import pytest
import torch
import torch.nn.functional as F

from bench import models


def tiny_gpt():
    torch.manual_seed(0)
    return models.GPT(models.GPTConfig.tiny()).eval()


def test_cached_forward_matches_full_forward():
    m = tiny_gpt()
    idx = torch.randint(0, m.cfg.vocab_size, (2, 12))
    with torch.no_grad():
        full = m(idx)
        m.setup_cache(2)
        prefix = m.forward_cached(idx[:, :9], torch.arange(9))
        steps = [m.forward_cached(idx[:, t:t + 1], torch.arange(t, t + 1)) for t in range(9, 12)]
    torch.testing.assert_close(prefix, full[:, :9], rtol=1e-5, atol=1e-5)
    for t, step in zip(range(9, 12), steps):
        torch.testing.assert_close(step[:, 0], full[:, t], rtol=1e-5, atol=1e-5)


def test_generate_is_greedy_decoding_of_the_full_model():
    m = tiny_gpt()
    prompt = torch.randint(0, m.cfg.vocab_size, (1, 6))
    m.setup_cache(1)
    tokens, first = models.generate(m, prompt, 5)
    assert tokens.shape == (1, 5)
    seq = prompt
    with torch.no_grad():
        for i in range(5):
            nxt = m(seq)[:, -1].argmax(-1, keepdim=True)
            assert torch.equal(nxt, tokens[:, i:i + 1])
            seq = torch.cat([seq, nxt], dim=1)
    torch.testing.assert_close(first, m(prompt).detach(), rtol=1e-5, atol=1e-5)


def test_generate_rejects_sequences_longer_than_the_cache():
    m = tiny_gpt()
    m.setup_cache(1)
    with pytest.raises(ValueError, match="max_seq"):
        models.generate(m, torch.zeros(1, m.cfg.max_seq - 2, dtype=torch.long), 3)


def test_head_is_tied_to_the_embedding():
    m = tiny_gpt()
    assert m.head.weight is m.wte.weight


@pytest.mark.parametrize("make,shape", [
    (lambda: models.MLPNet(d_in=16, hidden=32, depth=2, num_classes=4), (32, 16)),
    (lambda: models.SmallResNet(width=4, num_classes=4), (8, 3, 8, 8)),
])
def test_training_models_fit_a_fixed_batch(make, shape):
    torch.manual_seed(0)
    model = make()
    x = torch.randn(shape)
    y = torch.randint(0, 4, (shape[0],))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    first = None
    for _ in range(30):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < 0.5 * first


def test_gpt_training_lowers_the_loss():
    m = tiny_gpt().train()
    idx = torch.randint(0, m.cfg.vocab_size, (4, 16))
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        _, loss = m(idx[:, :-1], idx[:, 1:])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 1.0

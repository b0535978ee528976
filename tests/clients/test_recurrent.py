"""Recurrent models as users write them: a word-level LSTM language model
with its decoder tied to the embedding (the classic PyTorch example), and a
bidirectional GRU classifier over packed sequences of unequal length. Both
train on loom as on the CPU, with nothing on the CPU fallback."""
import pytest
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .harness import assert_ties_survive, compare

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")

VOCAB = 50


class LSTMLanguageModel(nn.Module):
    def __init__(self, width=24, layers=2):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.rnn = nn.LSTM(width, width, layers)
        self.decoder = nn.Linear(width, VOCAB)
        self.decoder.weight = self.embed.weight

    def forward(self, ids, state=None):
        out, state = self.rnn(self.embed(ids), state)
        return self.decoder(out), state


class GRUClassifier(nn.Module):
    def __init__(self, width=16, classes=4):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width, padding_idx=0)
        self.rnn = nn.GRU(width, width, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(4 * width, classes)

    def forward(self, ids, lengths):
        packed = pack_padded_sequence(self.embed(ids), lengths, batch_first=True,
                                      enforce_sorted=False)
        out, h = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True)
        mean = out.sum(1) / lengths.to(out.device, out.dtype).unsqueeze(1)
        return self.head(torch.cat([mean, h[-2:].transpose(0, 1).flatten(1)], 1))


def lm_batches(n=3, seq=9, batch=3, seed=7):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (seq + 1, batch), generator=g) for _ in range(n)]


def lm_loss(model, ids):
    logits, _ = model(ids[:-1])
    return nn.functional.cross_entropy(logits.flatten(0, 1), ids[1:].flatten())


def classifier_batches(n=3, seed=8):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        lengths = torch.tensor([7, 3, 5, 1])
        ids = torch.randint(1, VOCAB, (4, 7), generator=g)
        ids[torch.arange(7) >= lengths[:, None]] = 0
        out.append((ids, lengths, torch.randint(0, 4, (4,), generator=g)))
    return out


def classifier_loss(model, batch):
    ids, lengths, labels = batch
    # Packing takes the lengths on the CPU, as on CUDA.
    return nn.functional.cross_entropy(model(ids, lengths.cpu()), labels)


def test_lstm_language_model_tie_survives():
    m = LSTMLanguageModel()
    assert_ties_survive(m, "loom")
    assert m.decoder.weight is m.embed.weight


def test_lstm_language_model_trains_like_cpu():
    compare(LSTMLanguageModel, lm_batches(), lm_loss)


def test_gru_classifier_over_packed_sequences_trains_like_cpu():
    compare(GRUClassifier, classifier_batches(), classifier_loss)


def test_lstm_carries_state_across_batches():
    """Truncated backpropagation through time: the detached state of one
    batch starts the next, on loom as on the CPU."""
    torch.manual_seed(0)
    cpu = LSTMLanguageModel()
    loom = LSTMLanguageModel()
    loom.load_state_dict(cpu.state_dict())
    loom.to("loom")
    sc = sl = None
    for ids in lm_batches():
        oc, sc = cpu(ids[:-1], sc)
        ol, sl = loom(ids[:-1].to("loom"), sl)
        sc = tuple(s.detach() for s in sc)
        sl = tuple(s.detach() for s in sl)
        torch.testing.assert_close(ol.detach().cpu(), oc.detach(), rtol=1e-5, atol=1e-5)
    for a, b in zip(sl, sc):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5)

"""Hugging Face models, built from tiny configs with random weights (no
downloads), train on loom as on the CPU: ties survive `.to("loom")`, the
total parameter update after three AdamW steps matches, and greedy
`generate()` gives the CPU's tokens."""
import copy

import pytest
import torch
import transformers as tf

from .harness import assert_ties_survive, compare

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")

VOCAB = 96
# Dropout would draw from different generators on the two devices.
NO_DROPOUT = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def token_batches(n=3, batch=2, seq=12, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (batch, seq), generator=g) for _ in range(n)]


def lm_loss(model, ids):
    return model(input_ids=ids, labels=ids).loss


def gpt2():
    cfg = tf.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                        bos_token_id=1, eos_token_id=2, **NO_DROPOUT)
    return tf.GPT2LMHeadModel(cfg)


def llama():
    cfg = tf.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64, attention_dropout=0.0)
    return tf.LlamaForCausalLM(cfg)


def bert():
    cfg = tf.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=64, max_position_embeddings=32,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return tf.BertForMaskedLM(cfg)


def t5():
    cfg = tf.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                      num_heads=4, dropout_rate=0.0, decoder_start_token_id=0)
    return tf.T5ForConditionalGeneration(cfg)


def vit():
    cfg = tf.ViTConfig(image_size=16, patch_size=4, num_channels=3, hidden_size=32,
                       num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, num_labels=5)
    return tf.ViTForImageClassification(cfg)


def wav2vec2():
    # Weight-normed positional convolution, group norm, CTC loss.
    cfg = tf.Wav2Vec2Config(vocab_size=12, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16),
                            conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8,
                            num_conv_pos_embedding_groups=4, feat_extract_norm="group",
                            mask_time_prob=0.0, hidden_dropout=0.0, activation_dropout=0.0,
                            attention_dropout=0.0, feat_proj_dropout=0.0, final_dropout=0.0,
                            layerdrop=0.0, ctc_loss_reduction="mean", pad_token_id=0)
    return tf.Wav2Vec2ForCTC(cfg)


def whisper():
    cfg = tf.WhisperConfig(vocab_size=VOCAB, num_mel_bins=8, d_model=32, encoder_layers=1,
                           decoder_layers=1, encoder_attention_heads=4,
                           decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64,
                           max_source_positions=16, max_target_positions=32, dropout=0.0,
                           attention_dropout=0.0, activation_dropout=0.0, pad_token_id=0,
                           bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    return tf.WhisperForConditionalGeneration(cfg)


def audio_batches(n=3, seed=5):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        labels = torch.randint(1, 12, (2, 6), generator=g)
        labels[1, 4:] = -100                   # a shorter transcript, padded
        out.append((torch.randn(2, 400, generator=g), labels))
    return out


def ctc_loss(model, batch):
    audio, labels = batch
    return model(input_values=audio, labels=labels).loss


def speech_batches(n=3, seed=6):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(2, 8, 32, generator=g), torch.randint(3, VOCAB, (2, 6), generator=g))
            for _ in range(n)]


def speech_loss(model, batch):
    features, labels = batch
    return model(input_features=features, labels=labels).loss


def mlm_loss(model, ids):
    labels = ids.clone()
    labels[:, ::3] = -100                      # positions that are not predicted
    return model(input_ids=ids, labels=labels).loss


def seq2seq_loss(model, ids):
    return model(input_ids=ids, labels=ids.flip(1)).loss


def image_batches(n=3, seed=2):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(2, 3, 16, 16, generator=g), torch.randint(0, 5, (2,), generator=g))
            for _ in range(n)]


def image_loss(model, batch):
    x, y = batch
    return model(pixel_values=x, labels=y).loss


# Which parameters each model ties: the tie must survive `.to("loom")`.
TIES = {
    "gpt2": [["lm_head.weight", "transformer.wte.weight"]],
    "bert": [["bert.embeddings.word_embeddings.weight", "cls.predictions.decoder.weight"]],
    "whisper": [["model.decoder.embed_tokens.weight", "proj_out.weight"]],
    "t5": [["decoder.embed_tokens.weight", "encoder.embed_tokens.weight", "lm_head.weight",
            "shared.weight"]],
}

CASES = {
    "gpt2": (gpt2, token_batches, lm_loss),
    "llama_gqa": (llama, token_batches, lm_loss),
    "bert": (bert, token_batches, mlm_loss),
    "t5": (t5, token_batches, seq2seq_loss),
    "vit": (vit, image_batches, image_loss),
    "wav2vec2_ctc": (wav2vec2, audio_batches, ctc_loss),
    "whisper": (whisper, speech_batches, speech_loss),
}


@pytest.mark.parametrize("name", sorted(TIES))
def test_ties_survive_to_loom(name):
    model = CASES[name][0]()
    groups = assert_ties_survive(model, "loom")
    for group in TIES[name]:
        assert any(set(group) <= set(g) for g in groups), (group, groups)
    assert_ties_survive(model, "cpu")


@pytest.mark.parametrize("name", sorted(CASES))
def test_training_matches_cpu(name):
    build, batches, loss = CASES[name]
    compare(build, batches(), loss)


@pytest.mark.parametrize("name", ["gpt2", "llama_gqa"])
def test_greedy_generate_matches_cpu(name):
    torch.manual_seed(0)
    model = CASES[name][0]().eval()
    prompt = torch.randint(0, VOCAB, (2, 5), generator=torch.Generator().manual_seed(3))
    kwargs = dict(max_new_tokens=10, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        want = model.generate(prompt, attention_mask=torch.ones_like(prompt), **kwargs)
        model.to("loom")
        got = model.generate(prompt.to("loom"), attention_mask=torch.ones_like(prompt).to("loom"),
                             **kwargs)
    assert got.device.type == "loom"
    assert torch.equal(got.cpu(), want), (got.cpu(), want)
    assert want.shape[1] == prompt.shape[1] + 10

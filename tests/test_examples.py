"""The GPT example (examples/gpt.py, examples/train_gpt.py) at a tiny size:
it learns on loom with no op on the CPU fallback, takes the same steps as
the CPU, samples text of the length asked for, and its command line runs
end to end."""

import os
import subprocess
import sys

import pytest
import torch

from examples import gpt

from conftest import REPO_ROOT

TINY = gpt.ModelConfig(n_layer=2, d_model=32, n_head=2, context=16)


@pytest.fixture(scope="module")
def corpus():
    return gpt.CharCorpus.load()


def run_steps(corpus, device, steps, lr=1e-2, batch_size=4, seed=0, amp=None):
    """`steps` training steps of the tiny model on `device` (under autocast
    to `amp` when given); returns the model and the losses."""
    model = gpt.make_model(corpus.vocab_size, TINY, device, seed=seed)
    opt = gpt.make_optimizer(model, lr=lr)
    train, _ = corpus.split()
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        x, y = gpt.get_batch(train, batch_size, TINY.context, gen)
        losses.append(gpt.train_step(model, opt, x.to(device), y.to(device), amp).item())
    return model, losses


def test_corpus_round_trip(corpus):
    assert corpus.vocab_size == len(set(gpt.TEXT.read_text()))
    text = "To be, or not to be"
    assert corpus.decode(corpus.encode(text)) == text
    with pytest.raises(ValueError, match="not in the corpus"):
        corpus.encode("café")
    train, val = corpus.split(0.9)
    assert len(train) + len(val) == len(corpus.data) and len(val) > TINY.context
    x, y = gpt.get_batch(train, 3, TINY.context, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (3, TINY.context)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one


def test_loss_falls_on_loom(corpus, no_fallback):
    _, losses = run_steps(corpus, "loom", 30)
    # uniform guessing over the vocabulary at the start, well below it after
    assert abs(losses[0] - torch.log(torch.tensor(float(corpus.vocab_size))).item()) < 0.2
    assert sum(losses[-5:]) / 5 < losses[0] - 0.7, losses


def test_loss_falls_on_loom_under_bf16_autocast(corpus, no_fallback):
    model, losses = run_steps(corpus, "loom", 30, amp=torch.bfloat16)
    _, fp32 = run_steps(corpus, "loom", 1)
    with torch.no_grad(), torch.autocast("loom", dtype=torch.bfloat16):
        logits = model(torch.zeros(1, 4, dtype=torch.long, device="loom"))
    assert logits.dtype == torch.bfloat16  # the head's matmul ran in bf16
    assert losses[0] == pytest.approx(fp32[0], abs=0.05)  # bf16 rounding only
    assert sum(losses[-5:]) / 5 < losses[0] - 0.7, losses


def test_loom_steps_match_cpu(corpus, no_fallback):
    loom_model, loom_losses = run_steps(corpus, "loom", 4, lr=1e-3)
    cpu_model, cpu_losses = run_steps(corpus, "cpu", 4, lr=1e-3)
    assert loom_losses == pytest.approx(cpu_losses, rel=1e-5)
    loom_params = dict(loom_model.named_parameters())
    for name, p in cpu_model.named_parameters():
        torch.testing.assert_close(loom_params[name].cpu(), p, rtol=1e-4, atol=1e-5, msg=name)
    # the tied output head stays tied on loom
    assert loom_model.head.weight is loom_model.wte.weight


def test_lr_schedule():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=1.0)
    lrs = [gpt.set_lr(opt, 1.0, s, 20, 4) for s in range(20)]
    assert lrs[:4] == [0.25, 0.5, 0.75, 1.0]
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))
    assert 0.1 <= lrs[-1] < 0.15 and opt.param_groups[0]["lr"] == lrs[-1]


def test_generate_length_and_seed(corpus, no_fallback):
    model, _ = run_steps(corpus, "loom", 3)
    prompt = corpus.encode("Ham.\n")
    out = gpt.generate(model, prompt, 40, temperature=0.8, seed=3)
    assert len(out) == 40 and all(0 <= t < corpus.vocab_size for t in out)
    assert len(corpus.decode(out)) == 40
    assert gpt.generate(model, prompt, 40, temperature=0.8, seed=3) == out
    # past the context, the window slides
    greedy = gpt.generate(model, prompt, TINY.context + 5, temperature=0)
    assert len(greedy) == TINY.context + 5
    assert model.training  # generate restores the mode
    with pytest.raises(ValueError, match="prompt"):
        gpt.generate(model, [], 3)


def test_cli_end_to_end():
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOM_")}
    env["LOOM_FALLBACK"] = "error"
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, "examples", "train_gpt.py"), "--steps", "3",
         "--batch-size", "2", "--context", "16", "--layers", "1", "--width", "32", "--heads", "2",
         "--sample-chars", "30", "--prompt", "Ham.\n", "--seed", "1"],
        env=env, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "training on loom" in out and "3/3 |" in out
    assert "held-out loss:" in out and "loom / CPU eager = " in out
    assert "no op ran on the CPU fallback" in out
    sample = out.split("-" * 60 + "\n")[1]
    assert sample.startswith("Ham.\n") and len(sample) == len("Ham.\n") + 30 + 1  # + newline


def test_cli_reports_a_failing_compile_in_one_line(monkeypatch, capsys, no_fallback):
    """--compile on a device where compilation fails: one line naming
    torch.compile and the error, and exit status 2 (no traceback, no silent
    eager run)."""
    monkeypatch.syspath_prepend(os.path.join(REPO_ROOT, "examples"))
    import train_gpt

    def failing_compile(model, *args, **kwargs):
        def run(*a, **k):
            raise RuntimeError("no backend for this device\nsecond line")
        return run

    monkeypatch.setattr(torch, "compile", failing_compile)
    rc = train_gpt.main(["--compile", "--steps", "2", "--batch-size", "2", "--context", "16",
                         "--layers", "1", "--width", "32", "--heads", "2", "--sample-chars", "0"])
    assert rc == 2
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1] == ("torch.compile on loom is not yet available: "
                         "RuntimeError: no backend for this device")

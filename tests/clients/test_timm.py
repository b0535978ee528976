"""timm's ResNet and ConvNeXt, with random weights, train on loom as on the
CPU: batch norm (running statistics included), depthwise 7x7 convolutions,
layer norm over channels, GELU and global pooling."""
import pytest
import torch
import timm

from .harness import compare

pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "loom") and torch.loom.is_available()),
    reason="loom device not built")

CLASSES = 10


def image_batches(n=3, batch=4, size=32, seed=4):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, 3, size, size, generator=g),
             torch.randint(0, CLASSES, (batch,), generator=g)) for _ in range(n)]


def ce_loss(model, batch):
    x, y = batch
    return torch.nn.functional.cross_entropy(model(x), y)


MODELS = {
    "resnet18": dict(),
    "convnext_atto": dict(drop_path_rate=0.0),
}
# Batch norm leaves some gradients at rounding noise, which AdamW's first
# steps turn into full-size updates of random sign (see harness.compare).
OPTIMIZER = {"resnet18": dict(optimizer="sgd", lr=0.05), "convnext_atto": dict()}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_training_matches_cpu(name):
    def build():
        return timm.create_model(name, pretrained=False, num_classes=CLASSES, drop_rate=0.0,
                                 **MODELS[name])
    loom_model, *_ = compare(build, image_batches(), ce_loss, **OPTIMIZER[name])
    if name == "resnet18":
        # The running statistics moved with the model and were updated there.
        bn = loom_model.bn1
        assert bn.running_mean.device.type == "loom"
        assert bn.num_batches_tracked.item() == 3


def test_running_statistics_match_cpu():
    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False, num_classes=CLASSES)
    x = image_batches(1)[0][0]
    cpu = model.train()
    loom = timm.create_model("resnet18", pretrained=False, num_classes=CLASSES)
    loom.load_state_dict(cpu.state_dict())
    loom.to("loom").train()
    with torch.no_grad():
        cpu(x)
        loom(x.to("loom"))
    for (n, a), (_, b) in zip(cpu.named_buffers(), loom.named_buffers()):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-5, msg=n)
    loom.eval()
    cpu.eval()
    with torch.no_grad():
        torch.testing.assert_close(loom(x.to("loom")).cpu(), cpu(x), rtol=1e-4, atol=1e-4)

"""Inductor's FX graph cache on loom graphs: the generated kernels include
loom's ABI headers by absolute path, so a graph cached by another
installation of loom (another path, other headers) must be compiled again,
not loaded with includes that point elsewhere."""
import pytest
import torch
from torch._dynamo.utils import counters

pytestmark = pytest.mark.skipif(not (hasattr(torch, "loom") and torch.loom.is_available()),
                                reason="loom device not built")


def _step(x):
    return torch.relu(x * 2.0 + 1.0).sum(-1)


def _compile_and_run(x):
    torch._dynamo.reset()
    return torch.compile(_step)(x)


def test_graphs_cached_by_another_installation_compile_again(fresh_compile, tmp_path, monkeypatch):
    from torch._inductor import config as inductor_config

    from torch_loom._inductor import config

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    x = torch.randn(64, 33, device="loom")
    want = _step(x).cpu()
    with inductor_config.patch(fx_graph_cache=True, force_disable_caches=False):
        counters.clear()
        torch.testing.assert_close(_compile_and_run(x).cpu(), want)
        assert counters["inductor"]["fxgraph_cache_miss"] == 1
        torch.testing.assert_close(_compile_and_run(x).cpu(), want)
        assert counters["inductor"]["fxgraph_cache_hit"] == 1  # the cache serves this installation
        # the same headers at another path: the generated source would
        # name them there; no entry of this installation may be loaded
        elsewhere = config.abi_include.replace('#include "/', '#include "/elsewhere/')
        assert elsewhere != config.abi_include
        with config.patch(abi_include=elsewhere):
            torch._dynamo.reset()
            with pytest.raises(Exception, match="elsewhere"):
                torch.compile(_step)(x)
        assert counters["inductor"]["fxgraph_cache_hit"] == 1
        assert counters["inductor"]["fxgraph_cache_miss"] == 2

"""Every torch.accelerator function of PyTorch 2.13 works with loom."""

import torch


def test_device_functions(loom):
    assert torch.accelerator.current_accelerator() == torch.device("loom")
    assert torch.accelerator.current_accelerator(check_available=True).type == "loom"
    assert torch.accelerator.is_available()
    assert torch.accelerator.device_count() == loom.device_count()
    torch.accelerator.set_device_index(0)
    assert torch.accelerator.current_device_index() == 0
    with torch.accelerator.device_index(0):
        assert torch.accelerator.current_device_index() == 0
    assert torch.accelerator.current_device_index() == 0


def test_stream_functions(loom):
    s = torch.accelerator.current_stream()
    assert s.device.type == "loom"
    assert s == loom.default_stream()
    other = torch.Stream(device="loom")
    torch.accelerator.set_stream(other)
    try:
        assert torch.accelerator.current_stream() == other
        assert loom.current_stream() == other
        x = torch.ones(1000, device="loom") * 3
    finally:
        torch.accelerator.set_stream(s)
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(0)
    assert x.sum().item() == 3000
    assert torch.accelerator.current_stream() == s


def test_device_capability(loom):
    cap = torch.accelerator.get_device_capability()
    dtypes = cap["supported_dtypes"]
    for dt in [torch.float32, torch.float64, torch.float16, torch.bfloat16,
               torch.int64, torch.bool, torch.complex64]:
        assert dt in dtypes
    assert torch.float8_e4m3fn not in dtypes


def test_memory_functions(loom):
    torch.accelerator.empty_cache()
    base = torch.accelerator.memory_allocated()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="loom")
    assert torch.accelerator.memory_allocated() == base + (1 << 20)
    assert torch.accelerator.max_memory_allocated() >= base + (1 << 20)
    assert torch.accelerator.memory_reserved() >= torch.accelerator.memory_allocated()
    assert torch.accelerator.max_memory_reserved() >= torch.accelerator.memory_reserved()
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.current"] == base + (1 << 20)
    assert "reserved_bytes.large_pool.peak" in stats and "num_ooms" in stats
    del x
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated()
    torch.accelerator.reset_accumulated_memory_stats()
    assert torch.accelerator.memory_stats()["allocated_bytes.all.freed"] == 0
    free, total = torch.accelerator.get_memory_info()
    assert 0 < free <= total
    torch.accelerator.empty_cache()
    assert torch.accelerator.memory_reserved() <= torch.accelerator.max_memory_reserved()


def test_empty_host_cache(loom):
    p = torch.ones(1024).pin_memory()
    del p
    torch.accelerator.empty_host_cache()  # segfaults without a host allocator

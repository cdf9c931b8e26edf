"""Baseline for bench/gpu/attention.c: torch scaled_dot_product_attention on
contiguous K/V of the same shapes (bf16, head 128), a decode query per
sequence; the same rotation among caches so every call reads device memory;
the median of per-call CUDA event timings.  Also a device-to-device copy and
a causal prefill of 4096 tokens.  Output lines start with "torch"."""

import torch
import torch.nn.functional as F

HEAD_DIM = 128
REPS = 40
ROTATE_MIN = 1 << 30
SHAPES = [(1, 4096, 32, 32), (32, 2048, 32, 32), (64, 2048, 32, 8),
          (256, 1024, 32, 32), (8, 16384, 32, 8)]


def median_seconds(fn, sets):
    for i in range(3):
        fn(i % sets)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(REPS + 1)]
    ev[0].record()
    for i in range(REPS):
        fn(i % sets)
        ev[i + 1].record()
    torch.cuda.synchronize()
    ms = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(REPS))
    return ms[REPS // 2] / 1e3


def copy_bandwidth():
    a = torch.rand(1 << 30, device="cuda", dtype=torch.bfloat16)
    b = torch.empty_like(a)
    sec = median_seconds(lambda i: b.copy_(a), 1)
    print(f"torch copy d2d {2 * a.numel() * 2 / sec / 1e12:.3f} TB/s "
          f"(read + write of 2 GiB)")


def sdpa(q, k, v, causal=False):
    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                          enable_gqa=gqa)


def decode(batch, ctx, heads, kv_heads):
    set_bytes = batch * ctx * kv_heads * HEAD_DIM * 2
    sets = max(1, -(-ROTATE_MIN // (2 * set_bytes)))
    ks = [torch.rand(batch, kv_heads, ctx, HEAD_DIM, device="cuda",
                     dtype=torch.bfloat16) * 2 - 1 for _ in range(sets)]
    vs = [torch.rand_like(k) * 2 - 1 for k in ks]
    q = torch.rand(batch, heads, 1, HEAD_DIM, device="cuda",
                   dtype=torch.bfloat16) * 2 - 1
    sec = median_seconds(lambda i: sdpa(q, ks[i], vs[i]), sets)
    print(f"torch decode {batch}x{ctx}x{heads}/{kv_heads} {sec * 1e6:.1f} us "
          f"{2 * set_bytes / sec / 1e12:.3f} TB/s ({sets} caches)")
    del ks, vs
    torch.cuda.empty_cache()


def prefill(length, heads):
    q, k, v = (torch.rand(1, heads, length, HEAD_DIM, device="cuda",
                          dtype=torch.bfloat16) * 2 - 1 for _ in range(3))
    sec = median_seconds(lambda i: sdpa(q, k, v, causal=True), 1)
    flops = 4.0 * heads * HEAD_DIM * length * (length + 1) / 2
    print(f"torch prefill causal {length} x {heads} heads {sec * 1e6:.1f} us "
          f"{flops / sec / 1e12:.1f} TFLOP/s")


def main():
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}")
    copy_bandwidth()
    for shape in SHAPES:
        decode(*shape)
    prefill(4096, 32)


if __name__ == "__main__":
    main()

"""Held out of the built-in zoo: one decode step of a 1.3 B-parameter GPT-style model in bf16 with a KV cache.

    python -m pygpuperf.explain benchmarks/heldout/llm_decode.py:make_step --batch-size 1

Each step generates one token for `batch_size` sequences with `context` tokens already cached:
every layer's weights (2.4 GB in all) stream once through matrix-vector products, the
attention reads the cache, and the output head scores the vocabulary. Nothing of the weights
is resident in the L2 from the step before it: they are four times its size and more.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LAYERS, D_MODEL, HEADS, VOCAB = 24, 2048, 16, 50304


class _Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_attention = nn.LayerNorm(D_MODEL)
        self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.projection = nn.Linear(D_MODEL, D_MODEL)
        self.ln_mlp = nn.LayerNorm(D_MODEL)
        self.mlp_in = nn.Linear(D_MODEL, 4 * D_MODEL)
        self.mlp_out = nn.Linear(4 * D_MODEL, D_MODEL)

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, position: int) -> torch.Tensor:
        batch = x.shape[0]
        q, k, v = self.qkv(self.ln_attention(x)).split(D_MODEL, dim=2)
        heads = lambda t: t.view(batch, 1, HEADS, D_MODEL // HEADS).transpose(1, 2)  # noqa: E731
        k_cache[:, :, position:position + 1] = heads(k)
        v_cache[:, :, position:position + 1] = heads(v)
        y = F.scaled_dot_product_attention(heads(q), k_cache[:, :, :position + 1], v_cache[:, :, :position + 1])
        x = x + self.projection(y.transpose(1, 2).reshape(batch, 1, D_MODEL))
        return x + self.mlp_out(F.gelu(self.mlp_in(self.ln_mlp(x)), approximate="tanh"))


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Layer() for _ in range(LAYERS))
        self.ln_final = nn.LayerNorm(D_MODEL)
        self.head = nn.Linear(D_MODEL, VOCAB, bias=False)


def make_step(device: str = "cuda", batch_size: int = 1, context: int = 512) -> dict:
    device = torch.device(device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = Decoder().to(device=device, dtype=dtype).eval()
    head_dim = D_MODEL // HEADS
    caches = [(torch.randn(batch_size, HEADS, context + 1, head_dim, device=device, dtype=dtype),
               torch.randn(batch_size, HEADS, context + 1, head_dim, device=device, dtype=dtype))
              for _ in range(LAYERS)]
    x0 = torch.randn(batch_size, 1, D_MODEL, device=device, dtype=dtype)

    @torch.no_grad()
    def step() -> torch.Tensor:
        x = x0
        for layer, (k_cache, v_cache) in zip(model.layers, caches):
            x = layer(x, k_cache, v_cache, context)
        return model.head(model.ln_final(x)).argmax(dim=-1)

    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    return {"step": step, "samples_per_step": batch_size, "modules": (model,),
            "params": {"model": f"GPT decoder, {LAYERS} layers, d_model {D_MODEL}, {HEADS} heads, vocab {VOCAB}",
                       "weights_bytes": str(weights), "context": str(context), "batch_size": str(batch_size),
                       "dtype": str(dtype).removeprefix("torch."), "mode": "inference: one decode step"}}

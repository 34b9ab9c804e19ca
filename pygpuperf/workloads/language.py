"""A GPT-style decoder-only language model (GPT-2 small's shape) and its AdamW training step."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pygpuperf.workloads.knobs import KnobError, KnobSpec
from pygpuperf.workloads.recipe import LossScaling, ModelWorkload, Settings, StepRecipe, compile_module


@dataclass(frozen=True)
class GPTConfig:
    """GPT-2 small by default: 12 layers, d_model 768, 12 heads, 1024 tokens, GPT-2's 50257-token vocabulary."""

    layers: int = 12
    d_model: int = 768
    heads: int = 12
    seq_len: int = 1024
    vocab: int = 50257

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} must divide by heads {self.heads}")

    def parameter_count(self) -> int:
        """Parameters of :class:`GPT` at this config, without building it (output head tied to the embedding).

        Per layer: two LayerNorms (4d), QKV (3d^2 + 3d), attention projection (d^2 + d), MLP
        (4d^2 + 4d and 4d^2 + d); plus token and position embeddings and the final LayerNorm.
        """
        d = self.d_model
        per_layer = 12 * d * d + 13 * d
        return self.vocab * d + self.seq_len * d + self.layers * per_layer + 2 * d


class _Block(nn.Module):
    """Pre-LayerNorm transformer block: causal self-attention (scaled_dot_product_attention), then a GELU MLP."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        d = config.d_model
        self.heads = config.heads
        self.ln_attention = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.projection = nn.Linear(d, d)
        self.ln_mlp = nn.LayerNorm(d)
        self.mlp_in = nn.Linear(d, 4 * d)
        self.mlp_out = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, d = x.shape
        q, k, v = self.qkv(self.ln_attention(x)).split(d, dim=2)
        q, k, v = (t.view(batch, tokens, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.projection(y.transpose(1, 2).reshape(batch, tokens, d))
        return x + self.mlp_out(F.gelu(self.mlp_in(self.ln_mlp(x)), approximate="tanh"))


class GPT(nn.Module):
    """Token and learned position embeddings, `layers` blocks, final LayerNorm, output head tied to the embedding."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab, config.d_model)
        self.position_embedding = nn.Embedding(config.seq_len, config.d_model)
        self.blocks = nn.ModuleList(_Block(config) for _ in range(config.layers))
        self.ln_final = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab, bias=False)
        self.head.weight = self.token_embedding.weight
        self.apply(self._init_weights)
        # GPT-2 scales the residual projections' initial weights by 1/sqrt(2 * layers).
        for block in self.blocks:
            for projection in (block.projection, block.mlp_out):
                nn.init.normal_(projection.weight, 0.0, 0.02 / math.sqrt(2 * config.layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, 0.0, 0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_final(x))


def _config_knobs(default: GPTConfig) -> tuple[KnobSpec, ...]:
    return (
        KnobSpec("seq_len", "int", "tokens per sequence (the context length)", default=default.seq_len),
        KnobSpec("layers", "int", "transformer blocks", default=default.layers),
        KnobSpec("d_model", "int", "model width; must divide by heads", default=default.d_model),
        KnobSpec("heads", "int", "attention heads", default=default.heads),
        KnobSpec("vocab", "int", "vocabulary size", default=default.vocab, minimum=2),
    )


class GPTTraining(ModelWorkload):
    """One AdamW step of next-token prediction on a fixed batch of synthetic token ids."""

    dominant_op = "matmul"
    convolutional = False

    def __init__(self, name: str, description: str, config: GPTConfig, default_batch: dict[str, int],
                 defaults: dict[str, Any] | None = None) -> None:
        super().__init__(name, description, default_batch, defaults, _config_knobs(config))
        self.config = config

    def config_for(self, knobs: dict[str, Any]) -> GPTConfig:
        """The model config the knobs ask for (this workload's config where they are unset)."""
        names = ("layers", "d_model", "heads", "seq_len", "vocab")
        try:
            return GPTConfig(**{name: knobs.get(name) or getattr(self.config, name) for name in names})
        except ValueError as exc:
            raise KnobError(f"{self.name}: {exc}") from None

    def recipe(self, device: torch.device, batch: int, settings: Settings) -> StepRecipe:
        config = self.config_for(settings.knobs)
        model = GPT(config).to(device).train()
        data = torch.randint(0, config.vocab, (batch, config.seq_len + 1), device=device)
        inputs, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
        # GPT-2 / nanoGPT practice: weight decay on matrices and embeddings, not on biases and norms.
        decayed = [p for p in model.parameters() if p.dim() >= 2]
        undecayed = [p for p in model.parameters() if p.dim() < 2]
        groups = [{"params": decayed, "weight_decay": 0.1}, {"params": undecayed, "weight_decay": 0.0}]
        optimizer = torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), **settings.optimizer_options(adam=True))
        scaling = LossScaling(device, settings)
        compiled = compile_module(model, settings)

        def train(net: nn.Module) -> None:
            with settings.autocast(device):
                logits = net(inputs)
                loss = F.cross_entropy(logits.view(-1, config.vocab), targets.view(-1))
            scaling.backward(loss)
            scaling.step(optimizer)
            scaling.update()

        parameters = sum(p.numel() for p in model.parameters())
        params = {
            "model": (f"GPT decoder ({config.layers} layers, d_model {config.d_model}, {config.heads} heads, "
                      f"vocab {config.vocab}, tied output head)"),
            "parameters": str(parameters),
            "batch_size": str(batch),
            "seq_len": str(config.seq_len),
            "layers": str(config.layers),
            "d_model": str(config.d_model),
            "heads": str(config.heads),
            "vocab": str(config.vocab),
            "tokens_per_step": str(batch * config.seq_len),
            "attention": "torch.nn.functional.scaled_dot_product_attention(is_causal=True)",
            "optimizer": settings.optimizer_label("AdamW", "lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1"),
            "loss": "next-token cross_entropy",
            "data": "synthetic token ids, created once on the device",
        }
        params |= scaling.params()
        notes = [f"samples are sequences of {config.seq_len} tokens: tokens/s = samples/s x {config.seq_len}"]
        return StepRecipe(body=lambda: train(compiled), eager_body=lambda: train(model), optimizers=(optimizer,),
                          samples_per_step=batch, params=params, modules=(model,), notes=notes)


GPT_100M_TRAIN = GPTTraining(
    name="gpt-100m-train",
    description="GPT-style LM training step (GPT-2 small shape: 12 layers, d_model 768, 12 heads, 124 M "
    "parameters), 1024 tokens, AdamW, bf16 autocast",
    config=GPTConfig(),
    default_batch={"cuda": 16, "cpu": 1, "other": 4},
    defaults={"amp": "bf16"},
)

GPT_TINY_TRAIN = GPTTraining(
    name="gpt-tiny-train",
    description="small GPT-style LM training step (4 layers, d_model 256, 4 heads, 256 tokens, vocabulary 8192), "
    "AdamW, fp32: needs no torchvision, small enough for a CPU",
    config=GPTConfig(layers=4, d_model=256, heads=4, seq_len=256, vocab=8192),
    default_batch={"cpu": 4, "other": 32},
    defaults={"amp": "none"},
)


# --------------------------------------------------------------------------- BERT (encoder) fine-tuning


@dataclass(frozen=True)
class BERTConfig:
    """BERT-base by default: 12 layers, hidden 768, 12 heads, FFN 3072, WordPiece vocabulary of 30522."""

    layers: int = 12
    d_model: int = 768
    heads: int = 12
    seq_len: int = 384  # SQuAD fine-tuning's sequence length
    vocab: int = 30522
    max_positions: int = 512


class _EncoderBlock(nn.Module):
    """Post-LayerNorm encoder block as BERT has it: bidirectional self-attention, then a GELU (erf) FFN."""

    def __init__(self, config: BERTConfig) -> None:
        super().__init__()
        d = config.d_model
        self.heads = config.heads
        self.qkv = nn.Linear(d, 3 * d)
        self.projection = nn.Linear(d, d)
        self.ln_attention = nn.LayerNorm(d, eps=1e-12)
        self.ffn_in = nn.Linear(d, 4 * d)
        self.ffn_out = nn.Linear(4 * d, d)
        self.ln_ffn = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.view(batch, tokens, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v)
        x = self.ln_attention(x + self.projection(y.transpose(1, 2).reshape(batch, tokens, d)))
        return self.ln_ffn(x + self.ffn_out(F.gelu(self.ffn_in(x))))


class BERTForQuestionAnswering(nn.Module):
    """Word, position and token-type embeddings, the encoder, and SQuAD's span head (start and end logits)."""

    def __init__(self, config: BERTConfig) -> None:
        super().__init__()
        d = config.d_model
        self.word_embedding = nn.Embedding(config.vocab, d)
        self.position_embedding = nn.Embedding(config.max_positions, d)
        self.type_embedding = nn.Embedding(2, d)
        self.ln_embedding = nn.LayerNorm(d, eps=1e-12)
        self.blocks = nn.ModuleList(_EncoderBlock(config) for _ in range(config.layers))
        self.span = nn.Linear(d, 2)

    def forward(self, tokens: torch.Tensor, types: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.ln_embedding(self.word_embedding(tokens) + self.position_embedding(positions)
                              + self.type_embedding(types))
        for block in self.blocks:
            x = block(x)
        start, end = self.span(x).unbind(dim=-1)
        return start, end


class BERTSquadTraining(ModelWorkload):
    """One AdamW step of SQuAD-style span prediction on a fixed batch of synthetic sequences."""

    dominant_op = "matmul"
    convolutional = False

    def __init__(self, name: str, description: str, config: BERTConfig, default_batch: dict[str, int],
                 defaults: dict[str, Any] | None = None) -> None:
        super().__init__(name, description, default_batch, defaults, (
            KnobSpec("seq_len", "int", f"tokens per sequence (at most {config.max_positions})", default=config.seq_len),))
        self.config = config

    def recipe(self, device: torch.device, batch: int, settings: Settings) -> StepRecipe:
        seq_len = settings.knobs.get("seq_len") or self.config.seq_len
        if seq_len > self.config.max_positions:
            raise KnobError(f"{self.name}: seq_len {seq_len} is more than its {self.config.max_positions} positions")
        config = dataclasses.replace(self.config, seq_len=seq_len)
        model = BERTForQuestionAnswering(config).to(device).train()
        tokens = torch.randint(0, config.vocab, (batch, config.seq_len), device=device)
        types = (torch.arange(config.seq_len, device=device) >= config.seq_len // 3).long().expand(batch, -1)
        start, end = (torch.randint(0, config.seq_len, (batch,), device=device) for _ in range(2))
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-5, weight_decay=0.01,
                                      **settings.optimizer_options(adam=True))
        scaling = LossScaling(device, settings)
        compiled = compile_module(model, settings)

        def train(net: nn.Module) -> None:
            with settings.autocast(device):
                start_logits, end_logits = net(tokens, types)
                loss = (F.cross_entropy(start_logits.float(), start) + F.cross_entropy(end_logits.float(), end)) / 2
            scaling.backward(loss)
            scaling.step(optimizer)
            scaling.update()
            optimizer.zero_grad(set_to_none=True)

        params = {
            "model": f"BERT encoder ({config.layers} layers, hidden {config.d_model}, {config.heads} heads, "
                     f"vocab {config.vocab}) with a span head",
            "parameters": str(sum(p.numel() for p in model.parameters())),
            "batch_size": str(batch), "seq_len": str(config.seq_len),
            "attention": "torch.nn.functional.scaled_dot_product_attention (bidirectional)",
            "optimizer": settings.optimizer_label("AdamW", "lr=3e-5, weight_decay=0.01"),
            "loss": "start and end position cross_entropy", "data": "synthetic token ids, created once on the device",
        }
        params |= scaling.params()
        notes = [f"samples are sequences of {config.seq_len} tokens"]
        return StepRecipe(body=lambda: train(compiled), eager_body=lambda: train(model), optimizers=(optimizer,),
                          samples_per_step=batch, params=params, modules=(model,), notes=notes)


BERT_BASE_SQUAD_TRAIN = BERTSquadTraining(
    name="bert-base-squad-train",
    description="BERT-base fine-tuning step on SQuAD-shaped data (12 layers, hidden 768, 12 heads, 110 M "
    "parameters), 384 tokens, AdamW, fp16 autocast with loss scaling on GPUs (bf16 elsewhere)",
    config=BERTConfig(),
    default_batch={"cuda": 32, "cpu": 1, "other": 4},
    defaults={"amp": "auto"},
)

"""Small models the `new-gpu` collection trains: built from torch.nn alone (no download, no extra library).

A ResNet-like CNN (conv-BN-ReLU stages, stride-2 downsampling, channels doubling) and a decoder-only transformer
(pre-norm blocks with causal `scaled_dot_product_attention`, GELU MLP, LM head), small enough to be launch-bound
at small batches and compute-bound at large ones on a modern GPU.
"""

from __future__ import annotations

from typing import Any


def build_small_cnn(*, width: int, stages: int, classes: int = 10) -> Any:
    """`stages` stages of two 3x3 conv-BN-ReLU layers; every stage after the first halves the image and doubles
    the channels; global average pool and a linear classifier."""
    import torch.nn as nn

    layers: list[nn.Module] = []
    channels = 3
    for stage in range(stages):
        out = width * 2**stage
        stride = 1 if stage == 0 else 2
        layers += [nn.Conv2d(channels, out, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(),
                   nn.Conv2d(out, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU()]  # fmt: skip
        channels = out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, classes)]
    return nn.Sequential(*layers)


def build_small_gpt(*, width: int, blocks: int, vocab: int, seq_len: int) -> Any:
    """Token ids (batch, seq) -> logits (batch, seq, vocab); heads of 64 dimensions (at least one)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    heads = max(1, width // 64)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, s, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, heads, width // heads).permute(2, 0, 3, 1, 4)
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(attn.transpose(1, 2).reshape(b, s, width))
            return x + self.mlp(self.norm2(x))

    class SmallGPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(seq_len, width)
            self.blocks = nn.Sequential(*[Block() for _ in range(blocks)])
            self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, vocab, bias=False)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            pos = torch.arange(ids.shape[1], device=ids.device)
            return self.head(self.norm(self.blocks(self.tokens(ids) + self.positions(pos))))

    return SmallGPT()

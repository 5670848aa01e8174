"""The canonical models' building blocks (PyTorch): FC, residual conv, LSTM and attention stacks. Imports torch."""

from __future__ import annotations

import torch
from torch import nn

N_CLASSES = 10
LSTM_FEATURES = 16


class FCStack(nn.Module):
    """input [B, input_size] → Linear(width) → depth × (Linear + ReLU) → Linear(10)."""

    def __init__(self, depth: int, width: int, input_size: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Linear(input_size, width), nn.ReLU()]
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        layers.append(nn.Linear(width, N_CLASSES))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ResBlock(nn.Module):
    """Two 3×3 convolutions with a skip connection (ResNet basic block without normalisation)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.conv2(torch.relu(self.conv1(x))))


class ConvStack(nn.Module):
    """input [B, 3, S, S] → 3×3 conv to `width` channels → depth residual blocks → global average pool → Linear(10)."""

    def __init__(self, depth: int, width: int, input_size: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.blocks = nn.Sequential(*[ResBlock(width) for _ in range(depth)])
        self.head = nn.Linear(width, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(torch.relu(self.stem(x)))
        return self.head(x.mean(dim=(2, 3)))


class LSTMStack(nn.Module):
    """input [B, input_size (time steps), 16] → `depth`-layer LSTM of `width` units → last step → Linear(10)."""

    def __init__(self, depth: int, width: int, input_size: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(LSTM_FEATURES, width, num_layers=depth, batch_first=True)
        self.head = nn.Linear(width, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1, :])


class AttentionBlock(nn.Module):
    """Single-head self-attention plus an MLP, pre-norm, each with a residual (a transformer encoder layer)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.scale = width**-0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        attn = torch.softmax(torch.matmul(q, k.transpose(1, 2)) * self.scale, dim=-1)
        x = x + self.proj(torch.matmul(attn, v))
        return x + self.mlp(self.norm2(x))


class AttentionStack(nn.Module):
    """input [B, input_size (tokens), width] → depth attention blocks → mean over tokens → Linear(10)."""

    def __init__(self, depth: int, width: int, input_size: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[AttentionBlock(width) for _ in range(depth)])
        self.head = nn.Linear(width, N_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x).mean(dim=1))


STACKS: dict[str, type[nn.Module]] = {"fc": FCStack, "conv": ConvStack, "lstm": LSTMStack, "attention": AttentionStack}

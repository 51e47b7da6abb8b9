"""Model, data and training for the quickstart (plain PyTorch)."""

import torch
import torch.nn.functional as F
from torch import nn

NUM_FEATURES, NUM_CLASSES = 10, 3


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(NUM_FEATURES, 32)
        self.fc2 = nn.Linear(32, NUM_CLASSES)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def _centres() -> torch.Tensor:
    return torch.randn(NUM_CLASSES, NUM_FEATURES, generator=torch.Generator().manual_seed(0)) * 2


def make_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gaussian class clusters (the same three centres for everyone)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    return _centres()[y] + torch.randn(n, NUM_FEATURES, generator=g), y


def load_data(partition_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    return make_data(200, seed=1000 + partition_id)


def train(net: Net, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float, seed: int = 0) -> float:
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        idx = torch.randint(0, len(y), (32,), generator=g)
        opt.zero_grad()
        loss = F.cross_entropy(net(x[idx]), y[idx])
        loss.backward()
        opt.step()
    return float(loss.detach())


@torch.no_grad()
def test(net: Net, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((net(x).argmax(1) == y).float().mean())

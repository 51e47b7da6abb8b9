"""Model zoo: MLP, small CNN (and its LeNet widths), ResNet-8 and ResNet-18 for 32×32 inputs, 1-D CNN. ``build_model(name, ...)``.

Every model exposes ``features(x)`` (penultimate representation, used by CKA analyses)
and ``head`` (the final linear layer), with ``forward(x) = head(features(x))``.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class MLP(nn.Module):
    """Fully connected ReLU network (SPEC: 784-200-200-10 on MNIST)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...] = (200, 200)):
        super().__init__()
        layers: list[nn.Module] = [nn.Flatten()]
        width = math.prod(input_shape)
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class CNN(nn.Module):
    """Two 5×5 conv layers with max-pooling, then two linear layers (the FedAvg CNN: 32 and 64
    channels, 512 units)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, width: int = 512,
                 channels: tuple[int, int] = (32, 64)):
        super().__init__()
        if len(input_shape) != 3:
            raise ValueError(f"CNN needs C×H×W inputs, got shape {input_shape}")
        c = input_shape[0]
        self.conv = nn.Sequential(
            nn.Conv2d(c, channels[0], 5), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(channels[0], channels[1], 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.conv(torch.zeros(1, *input_shape)).shape[1]
        self.fc = nn.Sequential(nn.Linear(flat, width), nn.ReLU())
        self.head = nn.Linear(width, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class LeNet(CNN):
    """The same architecture at Caffe's LeNet widths — 20 and 50 channels, 500 units: ByzFL's
    ``cnn_mnist`` (``byzfl/fed_framework/models.py``: conv 1→20, 20→50, 5×5, each followed by ReLU
    and 2×2 max-pooling, then 800→500→10 on MNIST; about 431 k parameters), PyTorch's default
    initialisation as there. ByzFL's forward ends in ``log_softmax`` for its NLL loss; fedcal's
    models return logits for cross-entropy — the same loss."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__(input_shape, num_classes, width=500, channels=(20, 50))


class ResNet18(nn.Module):
    """torchvision's ResNet-18 adapted to 32×32 inputs: 3×3 stride-1 stem, no max-pool."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__()
        from torchvision.models import resnet18

        net = resnet18(weights=None, num_classes=num_classes)
        net.conv1 = nn.Conv2d(input_shape[0], 64, kernel_size=3, stride=1, padding=1, bias=False)
        net.maxpool = nn.Identity()
        self.head = net.fc
        net.fc = nn.Identity()
        self.net = net

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class ResNet8(nn.Module):
    """He et al.'s CIFAR ResNet (6n + 2 layers) with n = 1: a 3×3 convolution to 16 channels, one
    basic block per stage at 16, 32, 64 channels (strides 1, 2, 2), global average pooling, a
    linear head; about 78 k parameters. The robust-inference literature's client model.

    The blocks are torchvision's ``BasicBlock``; where a stage changes shape the shortcut is a 1×1
    convolution with batch norm (He et al.'s option B; their CIFAR runs used zero-padding, option
    A, which adds no parameters: a difference of about 2.6 k parameters, not of architecture).
    Source: He, Zhang, Ren & Sun, "Deep Residual Learning for Image Recognition" (CVPR 2016), §4.2.
    """

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, widths: tuple[int, int, int] = (16, 32, 64),
                 pooled: int = 1):
        super().__init__()
        from torchvision.models.resnet import BasicBlock

        if len(input_shape) != 3:
            raise ValueError(f"ResNet8 needs C×H×W inputs, got shape {input_shape}")
        layers: list[nn.Module] = [nn.Conv2d(input_shape[0], widths[0], 3, padding=1, bias=False),
                                   nn.BatchNorm2d(widths[0]), nn.ReLU(inplace=True)]
        width = widths[0]
        for planes, stride in zip(widths, (1, 2, 2)):
            shortcut = None
            if stride != 1 or planes != width:
                shortcut = nn.Sequential(nn.Conv2d(width, planes, 1, stride=stride, bias=False), nn.BatchNorm2d(planes))
            layers.append(BasicBlock(width, planes, stride=stride, downsample=shortcut))
            width = planes
        self.body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(pooled), nn.Flatten())
        self.head = nn.Linear(width * pooled * pooled, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class ResNet8Wide(ResNet8):
    """The robust-inference authors' client ResNet-8 (github.com/sacs-epfl/robust-federated-inference,
    ``FL/models/resnet8.py``, taken there from FedKD): the same one-block-per-stage ResNet as
    :class:`ResNet8` at widths 128, 256, 512 (a 3×3 convolution to 128 channels, basic blocks with
    batch norm, 1×1-convolution shortcuts), its last 8×8 map average-pooled to 2×2 (their
    ``avg_pool2d(out, 4)``) and flattened to 2,048 features before the linear head; about 4.9 M
    parameters. (Their module also holds a second linear head and a class embedding that its
    forward pass never uses; they are left out.)"""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__(input_shape, num_classes, widths=(128, 256, 512), pooled=2)


class CNN1D(nn.Module):
    """1-D CNN for single-lead heartbeat segments (N×L or N×1×L inputs)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__()
        channels = 1 if len(input_shape) == 1 else input_shape[0]
        self.conv = nn.Sequential(
            nn.Conv1d(channels, 32, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
            nn.Conv1d(32, 64, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(8), nn.Flatten(),
        )
        self.fc = nn.Sequential(nn.Linear(64 * 8, 128), nn.ReLU())
        self.head = nn.Linear(128, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim == 2:
            x = x.unsqueeze(1)
        return self.fc(self.conv(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class Linear(MLP):
    """A linear classifier (logistic regression): an :class:`MLP` without hidden layers. The text
    datasets' clients are this probe on a frozen encoder's sentence embeddings (fedcal.text.embed)."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int):
        super().__init__(input_shape, num_classes, hidden=())


MODEL_REGISTRY = {"mlp": MLP, "linear": Linear, "cnn": CNN, "lenet": LeNet, "resnet8": ResNet8,
                  "resnet8-wide": ResNet8Wide, "resnet18": ResNet18, "cnn1d": CNN1D}


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, seed: int | None = None) -> nn.Module:
    """Build a model by name; with ``seed`` its initial weights are reproducible."""
    if name not in MODEL_REGISTRY:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODEL_REGISTRY)}")
    if seed is None:
        return MODEL_REGISTRY[name](tuple(input_shape), num_classes)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MODEL_REGISTRY[name](tuple(input_shape), num_classes)

"""Feature geometry of a classifier: distances to the negative class prototypes (flwr-free).

The explanation the literature gives for temperature training's robustness: at high τ the
penultimate features end up nearly *equidistant* from every negative class prototype (the rows
w_j of the last linear layer), so no single wrong class is close and an untargeted attack has
no easy direction — while a targeted attack, which picks its class, is not slowed down.
"""

from __future__ import annotations

import torch


def prototype_distances(features: torch.Tensor, prototypes: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """‖f(x) − w_j‖₂ for every sample and every class j ≠ its label: shape (N, C − 1).

    ``features``: (N, d) penultimate features; ``prototypes``: (C, d), the last layer's weight
    rows; ``labels``: (N,) true classes. Computed in float64.
    """
    if features.ndim != 2 or prototypes.ndim != 2 or features.shape[1] != prototypes.shape[1]:
        raise ValueError(f"features (N, d) and prototypes (C, d) must share d, got {tuple(features.shape)} and "
                         f"{tuple(prototypes.shape)}")
    num_classes = prototypes.shape[0]
    if num_classes < 3:
        raise ValueError("the spread of negative-prototype distances needs at least 3 classes")
    dist = torch.cdist(features.double(), prototypes.double())  # (N, C)
    keep = ~torch.nn.functional.one_hot(labels.long(), num_classes).bool()
    return dist[keep].view(len(features), num_classes - 1)


def negative_prototype_spread(features: torch.Tensor, prototypes: torch.Tensor,
                              labels: torch.Tensor) -> dict[str, float]:
    """Per sample, the spread of its distances to the negative prototypes, averaged over samples.

    * ``proto_var``: mean over samples of Var_{j≠y} ‖f(x) − w_j‖ (population variance over the
      C − 1 negative classes) — the issue's statistic; its unit is feature-norm², so it grows
      with the feature scale, which temperature training changes;
    * ``proto_cv2``: mean over samples of that variance divided by the squared mean distance
      (squared coefficient of variation): the same equidistance, free of the scale, so models
      trained at different τ can be compared.
    """
    d = prototype_distances(features, prototypes, labels)
    var = d.var(dim=1, unbiased=False)
    return {"proto_var": float(var.mean()), "proto_cv2": float((var / d.mean(dim=1).pow(2)).mean())}

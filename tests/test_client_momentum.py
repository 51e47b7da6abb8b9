"""Client momentum (``client-momentum``) as ByzFL's honest clients keep it: the buffer by hand, a
run's global model against ByzFL's D-SGD recurrence computed here, and a resumed run's buffers."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from fedcal.app.engine import simulate
from fedcal.config import ConfigError, RunConfig
from fedcal.data import client_data, load_dataset
from fedcal.local_training import momentum_reply
from fedcal.models import build_model
from fedcal.results import run_dir_for


def test_the_buffer_by_hand_over_two_rounds():
    """m <- beta * m + (1 - beta) * u from a zero buffer, the reply global + m (beta = 0.9)."""
    g0 = {"w": torch.tensor([1.0, 2.0])}
    reply, m = momentum_reply(g0, {"w": torch.tensor([0.0, 4.0])}, None, 0.9)  # u = (-1, 2)
    assert torch.allclose(m["w"], torch.tensor([-0.1, 0.2])) and torch.allclose(reply["w"], torch.tensor([0.9, 2.2]))
    g1 = {"w": torch.tensor([0.9, 2.2])}
    reply, m = momentum_reply(g1, {"w": torch.tensor([1.9, 2.2])}, m, 0.9)  # u = (1, 0)
    # 0.9 * (-0.1, 0.2) + 0.1 * (1, 0) = (0.01, 0.18)
    assert torch.allclose(m["w"], torch.tensor([0.01, 0.18])) and torch.allclose(reply["w"], torch.tensor([0.91, 2.38]))
    # beta = 0: the plain update; a buffer not shaped like the model starts from zero
    reply, m = momentum_reply(g1, {"w": torch.tensor([1.9, 2.2])}, {"w": torch.zeros(3)}, 0.0)
    assert torch.equal(reply["w"], torch.tensor([1.9, 2.2]))
    with pytest.raises(ValueError, match="beta"):
        momentum_reply(g1, g1, None, 1.0)


ONE_CLIENT = dict(dataset="synthetic", model="linear", num_clients=1, clients_per_round=1, attack="none",
                  local_steps=1, batch_size=100_000, lr=0.5, num_rounds=2, engine="inprocess", strategy="fedavg")


def _byzfl_dsgd(cfg: RunConfig, beta: float) -> dict[str, torch.Tensor]:
    """ByzFL's D-SGD with one honest client and no attacker, here: m_t = beta m_{t-1} + (1 - beta)
    g(w_{t-1}), w_t = w_{t-1} - lr m_t, g the full-batch gradient (the batch holds all the client's data)."""
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    model = build_model(cfg.model, ds.input_shape, ds.num_classes, seed=cfg.seed)
    data = client_data(cfg.dataset, cfg.data_dir, 1, cfg.partition, cfg.dirichlet_alpha, cfg.seed, 0)
    w = {k: v.detach().clone() for k, v in model.named_parameters()}
    m = {k: torch.zeros_like(v) for k, v in w.items()}
    for _ in range(cfg.num_rounds):
        params = {k: v.clone().requires_grad_(True) for k, v in w.items()}
        loss = F.cross_entropy(functional_call(model, params, (data.x,)), data.y)
        grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
        m = {k: beta * m[k] + (1 - beta) * grads[k] for k in w}
        w = {k: w[k] - cfg.lr * m[k] for k in w}
    return w


def test_a_run_with_client_momentum_takes_byzfl_dsgd_steps(tmp_path):
    """Two rounds of one client with local-steps = 1: the final global model is ByzFL's D-SGD with
    momentum (buffer carried from round 1 into round 2), not plain SGD."""
    cfg = RunConfig(**ONE_CLIENT, client_momentum=0.5, output_dir=str(tmp_path))
    simulate(cfg, progress=False)
    got = torch.load(run_dir_for(cfg) / "model.pt", weights_only=True)
    want, plain = _byzfl_dsgd(cfg, 0.5), _byzfl_dsgd(cfg, 0.0)
    for k in want:
        assert torch.allclose(got[k], want[k], atol=1e-6), k
    assert max((want[k] - plain[k]).abs().max() for k in want) > 1e-3  # momentum changes the result


def test_client_momentum_is_hashed_only_when_set():
    base = RunConfig(**ONE_CLIENT)
    assert run_dir_for(RunConfig(**ONE_CLIENT, client_momentum=0.0)) == run_dir_for(base)
    assert run_dir_for(RunConfig(**ONE_CLIENT, client_momentum=0.9)) != run_dir_for(base)
    with pytest.raises(ConfigError, match="client-momentum"):
        RunConfig(**ONE_CLIENT, client_momentum=1.0).validate()


def test_a_buffer_not_shaped_like_the_model_restarts_from_zero_with_a_warning(caplog):
    """A node whose Context.state holds a momentum buffer of another shape (a tampered or foreign
    checkpoint) names itself in a warning and sends the plain (1 - beta) * u step, not a crash."""
    from flwr.app import ArrayRecord, Context, RecordDict

    from fedcal.tasks.train import MOMENTUM_KEY, _momentum_reply

    model = torch.nn.Linear(2, 1)
    sent = {k: v.detach().clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # the round's update u = 1 everywhere
    context = Context(run_id=1, node_id=7, node_config={"partition-id": 4}, run_config={},
                      state=RecordDict({MOMENTUM_KEY: ArrayRecord({"w": torch.zeros(3)})}))
    reply = _momentum_reply(sent, context, model, 0.5)
    assert "client 4: its momentum buffer is not shaped like the model" in caplog.text
    buffer = context.state[MOMENTUM_KEY].to_torch_state_dict()
    for k in sent:
        assert torch.allclose(buffer[k], torch.full_like(sent[k], 0.5))  # (1 - 0.5) * 1 from a zero buffer
        assert torch.allclose(reply[k], sent[k] + 0.5)

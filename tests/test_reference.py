"""The Flower apps and the plain-PyTorch loop are two implementations of the same run."""

import pandas as pd

from fedcal.config import RunConfig
from fedcal.reference import ReferenceSpec, run_plain, sampled_clients
from fedcal.results import load_metrics
from fedcal.app.engine import simulate


def test_flower_run_matches_plain_pytorch_loop(tmp_path):
    cfg = RunConfig.from_flower(dict(
        dataset="synthetic", num_clients=6, clients_per_round=3, num_rounds=3, attacker_ratio=0.34,
        attack="tsa", tau=5.0, lr=0.05, batch_size=16, local_steps=3, output_dir=str(tmp_path)))
    flower = load_metrics(simulate(cfg, progress=False))
    # the plain loop has no replies to account for: compare what both compute
    flower = flower[~flower.metric.isin(["round_seconds", "replies_received", "replies_accepted", "replies_rejected"])]
    flower = flower.pivot(index="round", columns="metric", values="value")
    plain = pd.DataFrame(run_plain(ReferenceSpec.from_config(cfg))).set_index("round").drop(columns="round_seconds")
    plain = plain[flower.columns]
    # equal up to floating-point summation order of the aggregation
    pd.testing.assert_frame_equal(flower, plain, check_names=False, rtol=1e-5, atol=1e-5)


def test_global_state_is_the_runs_global_model(tmp_path):
    """global_state(ReferenceSpec.from_config(cfg), r): round 0 is the initial model the run starts from, the last round the
    Flower run's saved final model (up to the aggregation's summation order)."""
    import torch

    from fedcal.models import build_model
    from fedcal.data import load_dataset
    from fedcal.reference import ReferenceSpec, global_state

    cfg = RunConfig.from_flower(dict(
        dataset="synthetic", num_clients=6, clients_per_round=3, num_rounds=3, attacker_ratio=0.34,
        attack="tsa", tau=5.0, lr=0.05, batch_size=16, local_steps=3, output_dir=str(tmp_path)))
    run = simulate(cfg, progress=False)
    final = torch.load(run / "model.pt", weights_only=True)
    ds = load_dataset(cfg.dataset, cfg.data_dir)
    initial = build_model(cfg.model, ds.input_shape, ds.num_classes, seed=cfg.seed).state_dict()
    assert all(torch.equal(v, global_state(ReferenceSpec.from_config(cfg), 0)[k]) for k, v in initial.items())
    replayed = global_state(ReferenceSpec.from_config(cfg), 3)
    assert all(torch.allclose(v, replayed[k], atol=1e-6) for k, v in final.items())
    assert not all(torch.allclose(v, global_state(ReferenceSpec.from_config(cfg), 2)[k], atol=1e-6) for k, v in final.items())
    import pytest

    with pytest.raises(ValueError, match="server_round"):
        global_state(ReferenceSpec.from_config(cfg), 4)


def _sampling(cfg):
    return {"seed": cfg.seed, "num_clients": cfg.num_clients, "clients_per_round": cfg.clients_per_round}


def test_sampling_is_seeded_per_round():
    cfg = RunConfig()
    assert sampled_clients(1, **_sampling(cfg)) == sampled_clients(1, **_sampling(cfg))
    assert len(set(sampled_clients(1, **_sampling(cfg)))) == 5
    assert sampled_clients(1, **_sampling(cfg)) != sampled_clients(2, **_sampling(cfg))


def test_inprocess_engine_matches_ray_engine(tmp_path):
    """The in-process engine drives the same ServerApp/ClientApp/strategy: same metrics —
    bit for bit when the clients use the same intra-op thread count as Ray's actors (1)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _compare_engines(tmp_path)
    finally:
        torch.set_num_threads(threads)


def _compare_engines(tmp_path):
    base = dict(dataset="synthetic", num_clients=6, clients_per_round=3, num_rounds=3, attacker_ratio=0.34,
                attack="tsa", tau=0.2, lr=0.05, batch_size=16, local_steps=3, strategy="foolsgold")
    frames = {}
    for engine in ("ray", "inprocess"):
        cfg = RunConfig.from_flower(dict(base, engine=engine, output_dir=str(tmp_path / engine)))
        df = load_metrics(simulate(cfg, progress=False))
        frames[engine] = df[df.metric != "round_seconds"].pivot(index="round", columns="metric", values="value")
    pd.testing.assert_frame_equal(frames["ray"], frames["inprocess"], check_exact=True)

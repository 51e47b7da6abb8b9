"""A LoRA method is a plug-in: the toy method of tests/toy_lora_method.py (FedIT whose server clips every
client's B to a norm bound), defined outside ``fedcal/``, registered with the catalogue, is a value of
the ``dst-method`` key, its server aggregates as computed by hand, its own key (``clipb-bound``, declared
in its Component) is validated, hashed only when set and handed to its strategy, and a tiny distill run
finishes with it.

Its registration lasts for this module's tests only (the catalogue's registry is copied before and put
back after), so that the other tests see fedcal's LoRA methods alone.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import pandas as pd
import pytest
import torch

pytest.importorskip("peft")
pytest.importorskip("transformers")

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fedcal.config import RunConfig
from fedcal.strategies.lora_baselines import FedIT
from tests import test_bad_inputs as hostile
from tests.strategy_harness import FakeGrid
from tests.test_distill_task import TINY as DISTILL_TINY

# the smallest distill run of tests/test_distill_task.py (synthetic corpus, a hidden-16 backbone), one rank
TINY = {**DISTILL_TINY, "dst-ranks": "4", "dst-method": "fedit_clipb"}

L = "base_model.model.roberta.encoder.layer.0.attention.self.query"
A_KEY, B_KEY = f"{L}.lora_A.default.weight", f"{L}.lora_B.default.weight"
H_KEY = "base_model.model.classifier.modules_to_save.default.out_proj.weight"

from tests.plugin_harness import registered


@pytest.fixture(scope="module", autouse=True)
def toy():
    import toy_lora_method

    with registered("lora-method", toy_lora_method.CLIPPED_B):
        yield toy_lora_method


def _adapter(a, b, head):
    return OrderedDict([(A_KEY, torch.tensor(a)), (B_KEY, torch.tensor(b)), (H_KEY, torch.tensor(head))])


def _aggregate(strategy, states_and_sizes):
    """One round of ``strategy``: every node sent a zero adapter, answers with its state and num-examples."""
    answers = {node: RecordDict({"arrays": ArrayRecord(s), "metrics": MetricRecord({"num-examples": n})})
               for node, (s, n) in enumerate(states_and_sizes, start=1)}
    zero = OrderedDict((k, torch.zeros_like(v)) for k, v in states_and_sizes[0][0].items())
    grid = FakeGrid(list(answers), lambda node, content: answers[node])
    replies = grid.send_and_receive(strategy.configure_train(1, ArrayRecord(zero), ConfigRecord(), grid))
    new, _ = strategy.aggregate_train(1, replies)
    return {k: torch.from_numpy(new[k].numpy().copy()) for k in new}


# two rank-1 adapters of a 2→2 layer: client 1's B has norm 5 (clipped to 1), client 2's norm 0.5 (kept)
S1 = _adapter([[1.0, 0.0]], [[3.0], [4.0]], [[1.0, 1.0]])
S2 = _adapter([[0.0, 2.0]], [[0.3], [0.4]], [[5.0, 1.0]])


def test_the_server_clips_each_b_then_averages_as_fedit_by_hand(toy):
    close = torch.testing.assert_close
    close(toy.clip_b(S1, 1.0)[B_KEY], torch.tensor([[0.6], [0.8]]))
    close(toy.clip_b(S2, 1.0)[B_KEY], torch.tensor([[0.3], [0.4]]))  # inside the bound: as it is
    assert toy.clip_b(S1, 1.0)[A_KEY] is S1[A_KEY]  # A and the head are not touched
    out = _aggregate(toy.ClippedBFedIT(alpha=8.0, b_bound=1.0), [(S1, 1), (S2, 3)])  # p = 1/4, 3/4
    close(out[B_KEY], torch.tensor([[0.375], [0.5]]))  # 1/4 (0.6, 0.8) + 3/4 (0.3, 0.4)
    close(out[A_KEY], torch.tensor([[0.25, 1.5]]))  # FedIT's: 1/4 (1, 0) + 3/4 (0, 2)
    close(out[H_KEY], torch.tensor([[4.0, 1.0]]))
    plain = _aggregate(FedIT(alpha=8.0), [(S1, 1), (S2, 3)])  # FedIT's own: client 1's long B unclipped
    close(plain[B_KEY], torch.tensor([[0.975], [1.3]]))


@pytest.mark.parametrize("kind", hostile.LORA_KINDS)
def test_a_hostile_reply_is_left_out_by_the_plugins_strategy_as_by_fedit_s(toy, kind, caplog):
    """The hostile-reply matrix of tests/test_bad_inputs.py's LoRA strategies, for the plug-in's: its
    replies are checked by FedIT's validation before any B is clipped, so each hostile reply is left out
    naming FedIT's reason (or, a huge claimed size, weighed), the round aggregates, the result is finite."""
    import logging

    s = toy.ClippedBFedIT(alpha=hostile.LORA_ALPHA, node_label=hostile.partition_of, node_sort_key=hostile.partition_of,
                          allowed_ranks=hostile.LORA_RANKS["fedit"], template=hostile.lora_state(1, 0), b_bound=0.1)

    def respond(node, content):
        p = hostile.partition_of(node)
        return hostile.lora_hostile("fedit", kind, content) if p == 0 else hostile.lora_honest("fedit", p, content)

    with caplog.at_level(logging.INFO, logger="flwr"):
        new, _ = hostile.lora_round(s, "fedit", respond)
    account, expected = s.replies[1], hostile.LORA_EXPECTED[kind]["fedit"]
    assert account.received == 4 and account.aggregated and new is not None and hostile.record_finite(new)
    if expected is None:
        assert not account.rejections
    else:
        (node, reason), = account.rejections
        assert node == hostile.node_of(0) and expected in reason, reason
        assert hostile.assert_rejections_logged(s, caplog) == 1
    for layer in hostile.LORA_LAYERS:  # every B aggregated was clipped to 0.1 first (an honest one: about 0.45)
        assert float(torch.from_numpy(new[hostile.lora_keys(layer)[1]].numpy().copy()).norm()) <= 0.1 + 1e-6


def test_dst_method_takes_the_plugin_and_its_own_key():
    from fedcal.config import ConfigError, setting_of
    from fedcal.distill.methods import lora_method

    cfg = RunConfig.from_flower({**TINY, "clipb-bound": 0.5})
    assert cfg.dst_method == "fedit_clipb" and cfg.clipb_bound == 0.5 and cfg.to_flower()["clipb-bound"] == 0.5
    assert RunConfig.from_flower(TINY).clipb_bound == 1.0  # its declared default
    s = setting_of("clipb-bound")
    assert (s.type, s.range_text(), s.only_with_text()) == ("float", "a finite number > 0",
                                                            "dst-method names fedit_clipb")
    assert s.read_by(cfg) and not s.read_by(RunConfig.from_flower({**TINY, "dst-method": "fedit"}))
    method = lora_method("fedit_clipb")
    assert method.one_rank and not method.uploads_logits and method.strategy_class().__name__ == "ClippedBFedIT"
    with pytest.raises(ConfigError, match="must name one rank for dst-method=fedit_clipb"):  # FedIT's facts hold
        RunConfig.from_flower({**TINY, "dst-ranks": "2,4"})
    with pytest.raises(ConfigError, match="fedit_clipb"):  # an unknown name lists the plug-in among the choices
        RunConfig.from_flower({**TINY, "dst-method": "fedit_clip"})


@pytest.mark.parametrize("value, message", [
    (0, "run-config key 'clipb-bound' must be a finite number > 0, got 0.0"),
    ("nan", "run-config key 'clipb-bound' must be a finite number > 0, got nan"),
    ("wide", "run-config key 'clipb-bound' must be a number, got 'wide'"),
])
def test_a_bad_value_of_the_plugins_key_fails_in_one_line(capsys, value, message):
    from fedcal.cli import main

    assert main(["run", "--no-progress", 'task="distill"', 'dst-method="fedit_clipb"', 'dst-ranks="4"',
                 f"clipb-bound={value}"]) == 2
    err = capsys.readouterr().err
    assert err == f"fedcal: error: {message}\n", err


def test_the_plugins_key_counts_in_the_run_hash_only_when_set_and_its_method_chosen():
    from fedcal.results.identity import config_hash

    def h(**kw):
        return config_hash(RunConfig.from_flower({**TINY, **kw}))

    assert h() == h(**{"clipb-bound": 1.0})  # at its default: not hashed
    assert h() != h(**{"clipb-bound": 0.5})
    assert h(**{"dst-method": "fedit"}) == h(**{"dst-method": "fedit", "clipb-bound": 0.5})  # fedit never reads it


@pytest.mark.usefixtures("one_thread_and_tmp_cache")
def test_a_distill_run_with_the_plugin_finishes_and_its_key_bounds_the_global_b(tmp_path):
    """Every B of the saved global adapter is an average of clipped Bs, so its norm is within the bound
    the run's clipb-bound handed to the strategy (the strategy's default, 1, would not bound it)."""
    from fedcal.app.engine import simulate
    from fedcal.results import run_dir_for

    bound = 1e-4
    cfg = RunConfig.from_flower({**TINY, "clipb-bound": bound, "output-dir": str(tmp_path / "runs")})
    run_dir = simulate(cfg, progress=False)
    assert run_dir == run_dir_for(cfg) and (run_dir / "DONE").exists()
    assert run_dir.name.startswith("distill-synthetic-fedit_clipb-")
    m = pd.read_csv(run_dir / "metrics.csv").pivot_table(index="round", columns="metric", values="value")
    assert (m.loc[[1, 2], "replies_accepted"] == 3).all() and m["ca"].notna().all()
    model = torch.load(Path(run_dir) / "model.pt", weights_only=True)
    norms = [float(v.norm()) for k, v in model.items() if ".lora_B." in k or ".lora_embedding_B." in k]
    assert norms and max(norms) <= bound * (1 + 1e-5), norms
    assert max(norms) > bound / 10  # trained B's, pulled down to the bound: not zero


def test_nothing_under_fedcal_names_the_plugin():
    root = Path(__file__).resolve().parents[1] / "fedcal"
    named = [str(p) for p in root.rglob("*.py") if any(w in p.read_text() for w in ("fedit_clipb", "clipb", "ClippedB"))]
    assert named == []


def test_design_md_shows_this_test_s_lora_method():
    from fedcal.pages import include_tables as tool

    page = (Path(__file__).resolve().parents[1] / "docs" / "design.md").read_text()
    assert "<!-- example: tests/toy_lora_method.py -->" in page
    assert tool.refreshed(page) == page, "run python -m fedcal.pages include_tables docs/design.md"

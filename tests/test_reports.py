"""fedcal.reports: the one final-metrics reader and the one Markdown table writer."""

import json
import os
import math
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fedcal.config import RunConfig
from fedcal.reports import (collect, final_metrics, markdown_table, percent_cell, seed_table, seeds_markdown,
                            summarise, to_markdown)
from fedcal.results import config_hash, run_dir_for

ROOT = Path(__file__).resolve().parents[1]


def write_run(cfg: RunConfig, rows: list[tuple[int, str, float]], finished: bool = True) -> Path:
    """A run directory written by hand: config.json and metrics.csv, as the run store lays them out,
    and (``finished``) the DONE marker holding the config hash."""
    d = run_dir_for(cfg)
    d.mkdir(parents=True)
    h = config_hash(cfg)
    (d / "config.json").write_text(json.dumps({"run_id": d.name, "config_hash": h, "config": cfg.to_flower()}))
    lines = ["run_id,round,metric,value,config_hash"] + [f"{d.name},{r},{m},{v!r},{h}" for r, m, v in rows]
    (d / "metrics.csv").write_text("\n".join(lines) + "\n")
    if finished:
        (d / "DONE").write_text(h)
    return d


def evaluated(rnd: int, acc: float, sece: float) -> list[tuple[int, str, float]]:
    return [(rnd, "accuracy", acc), (rnd, "ece", 0.05), (rnd, "sece", sece), (rnd, "brier", 0.2), (rnd, "nll", 0.4),
            (rnd, "round_seconds", 1.5)]


@pytest.fixture
def store(tmp_path):
    base = RunConfig(dataset="synthetic", output_dir=str(tmp_path), num_rounds=3, eval_every=2)
    # evaluated at rounds 0, 2 and 3 (the last); round 1 logs its timing only
    benign = write_run(base.replace(attack="none"), evaluated(0, 0.1, 0.3) + [(1, "round_seconds", 2.5)]
                       + evaluated(2, 0.6, 0.05) + evaluated(3, 0.8, 0.02))
    tsa = write_run(base.replace(attack="tsa", tau=5.0), evaluated(0, 0.1, 0.3) + [(1, "round_seconds", 2.5)]
                    + evaluated(2, 0.7, -0.1) + evaluated(3, 0.75, -0.2))
    unstarted = run_dir_for(base.replace(attack="tsa", tau=0.2))
    unstarted.mkdir()
    (unstarted / "config.json").write_text(json.dumps({"config": base.replace(attack="tsa", tau=0.2).to_flower()}))
    (unstarted / "metrics.csv").write_text("run_id,round,metric,value,config_hash\n")
    return {"base": base, "benign": benign, "tsa": tsa, "unstarted": unstarted}


def test_final_metrics_reads_the_last_evaluated_round(store):
    final = final_metrics([store["tsa"], store["benign"], store["unstarted"]])
    assert len(final) == 2  # the run without any round is left out
    rows = final.set_index("run_id")
    benign, tsa = rows.loc[store["benign"].name], rows.loc[store["tsa"].name]
    # round 3 is the last evaluated round (round 1 logged its timing only)
    assert benign["round"] == 3 and benign["accuracy"] == 0.8 and benign["sece"] == 0.02
    assert benign["round_seconds"] == 1.5
    assert tsa["round"] == 3 and tsa["accuracy"] == 0.75 and tsa["sece"] == -0.2
    # config columns (kebab-case keys) come with the metrics
    assert benign["attack"] == "none" and tsa["tau"] == 5.0 and tsa["num-rounds"] == 3
    assert list(final.columns[:2]) == ["run_id", "dataset"]
    assert list(final.columns[-7:]) == ["round", "accuracy", "brier", "ece", "nll", "round_seconds", "sece"]
    # one directory (as `fedcal run` prints it) works too
    one = final_metrics(store["benign"])
    assert len(one) == 1 and one["accuracy"].iloc[0] == 0.8


def test_final_metrics_keeps_a_diverged_metric_as_nan(tmp_path):
    cfg = RunConfig(dataset="synthetic", output_dir=str(tmp_path), num_rounds=1)
    d = write_run(cfg, evaluated(0, 0.1, 0.3) + [(1, "accuracy", float("nan")), (1, "sece", float("nan")),
                                                  (1, "round_seconds", 2.0)])
    final = final_metrics([d])
    assert final["round"].tolist() == [1] and final["round_seconds"].tolist() == [2.0]
    assert math.isnan(final["accuracy"].iloc[0]) and math.isnan(final["sece"].iloc[0])


def test_tau_table_and_sweep_cells_use_the_final_metrics(store):
    table = summarise([store["benign"], store["tsa"], store["unstarted"]])
    assert table["tau"].tolist() == [1.0, 5.0]
    assert table["accuracy_%"].tolist() == [80.0, 75.0]  # the last evaluated round of each
    assert table["d_sece"].tolist() == pytest.approx([0.0, -22.0])
    base = store["base"]
    cells, rounds = collect([base.replace(attack="tsa", tau=5.0), base.replace(attack="none")], ["tau"])
    final = final_metrics([store["benign"], store["tsa"]]).drop(columns="round")
    assert cells.pop("chance_level").tolist() == [False, False]  # 80 and 75 % of a 4-class task
    assert cells.pop("stalled").tolist() == [False, False]  # no last round that accepted no reply
    pd.testing.assert_frame_equal(cells, final.sort_values("tau").reset_index(drop=True))
    assert len(rounds) == 2 * (6 + 1 + 6 + 6)


def test_markdown_table_plain_titled_and_formatted():
    frame = pd.DataFrame({"name": ["a", "b"], "x": [0.5, 2.0], "n": [1, 20]})
    assert markdown_table(frame) == (
        "| name | x | n |\n"
        "|---|---|---|\n"
        "| a | 0.5 | 1 |\n"
        "| b | 2.0 | 20 |\n")
    assert markdown_table(frame, "T", formats={"x": "{:+.2f}", "name": str.upper}) == (
        "**T**\n"
        "\n"
        "| name | x | n |\n"
        "|---|---|---|\n"
        "| A | +0.50 | 1 |\n"
        "| B | +2.00 | 20 |\n")
    assert markdown_table(frame[["x"]], default="<{}>") == "| x |\n|---|\n| <0.5> |\n| <2.0> |\n"


def test_tau_table_markdown():
    table = pd.DataFrame({"strategy": ["fedavg", "fedavg"], "tau": [1.0, 5.0], "run": ["benign", "TSA"],
                          "accuracy_%": [90.0, 85.126], "ece_%": [1.0, 2.5], "sece_%": [0.5, -3.25],
                          "brier": [0.1, 0.12345], "nll": [0.3, 0.4], "run_id": ["r1", "r5"], "seed": [0, 0],
                          "d_accuracy": [0.0, -4.874], "d_sece": [0.0, -3.75]})
    assert to_markdown(table, "MNIST") == (
        "**MNIST**\n"
        "\n"
        "| tau | run | accuracy_% | ece_% | sece_% | brier | nll | d_accuracy | d_sece |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
        "| 1 | benign | 90.00 | 1.00 | +0.50 | 0.1000 | 0.3000 | +0.00 | +0.00 |\n"
        "| 5 | TSA | 85.13 | 2.50 | -3.25 | 0.1235 | 0.4000 | -4.87 | -3.75 |\n")


def test_seed_table_markdown_mean_pm_std():
    metrics = ["accuracy_%", "ece_%", "sece_%", "brier", "nll", "d_accuracy", "d_sece"]
    agg = pd.DataFrame({"strategy": ["fedavg"], "tau": [0.2], "run": ["TSA"],
                        **{f"{m}_mean": [1.5] for m in metrics}, **{f"{m}_std": [0.25] for m in metrics},
                        "seeds": [5]})
    assert seeds_markdown(agg, "over seeds") == (
        "**over seeds**\n"
        "\n"
        "| tau | run | accuracy_% | ece_% | sece_% | brier | nll | d_accuracy | d_sece | seeds |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
        "| 0.2 | TSA | 1.50 ± 0.25 | 1.50 ± 0.25 | 1.50 ± 0.25 | 1.5000 ± 0.2500 | 1.5000 ± 0.2500 | 1.50 ± 0.25 "
        "| 1.50 ± 0.25 | 5 |\n")
    two = pd.concat([agg, agg.assign(strategy="median")], ignore_index=True)
    assert seeds_markdown(two).splitlines()[0].startswith("| strategy | tau | run |")


def test_inference_seed_table_markdown():
    cells = pd.DataFrame({"aggregator": ["median", "mean"] * 4, "seed": [0, 0, 0, 0, 1, 1, 1, 1],
                          "attack": ["none", "none", "lma", "lma"] * 2, "f_adv": 1,
                          "accuracy": [0.9, 0.8, 0.7, 0.2, 0.8, 0.9, 0.6, 0.4]})
    table = seed_table(cells)
    assert markdown_table(table.reset_index(), "n = 4, f = 1") == (
        "**n = 4, f = 1**\n"
        "\n"
        "| aggregator | none | lma | worst case |\n"
        "|---|---|---|---|\n"
        "| mean | 85.00 ± 7.07 | 30.00 ± 14.14 | 30.00 ± 14.14 |\n"
        "| median | 85.00 ± 7.07 | 65.00 ± 7.07 | 65.00 ± 7.07 |\n")
    assert percent_cell(0.5, float("nan"), 1) == "50.00"


def _build_results():
    from fedcal.pages import build_results

    return build_results


def test_results_page_tables_go_through_markdown_table():
    br = _build_results()
    frame = pd.DataFrame({"lr": [0.005, 0.05, 0.025], "tau": [1.0, 0.25, 0.33], "n_cal": [10.0, 250.0, 50.0],
                          "accuracy": [0.91234, 0.5, 0.25], "brier": [0.123456, 0.2, 0.3]})
    # config values exactly as set (lr = 0.025 once printed as 0.03), metrics at fixed decimals
    assert br.markdown(frame, pct=("accuracy",)) == (
        "| lr | tau | n_cal | accuracy | brier |\n"
        "|---|---|---|---|---|\n"
        "| 0.005 | 1 | 10 | 91.23 | 0.1235 |\n"
        "| 0.05 | 0.25 | 250 | 50.00 | 0.2000 |\n"
        "| 0.025 | 0.33 | 50 | 25.00 | 0.3000 |\n")


def test_one_markdown_writer():
    """No module but fedcal/reports/markdown.py writes a Markdown table's separator or row by hand."""
    writer = ROOT / "fedcal" / "reports" / "markdown.py"
    pattern = re.compile(r"---\||\"\| \"|' \| '|\" \| \"")
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "fedcal").rglob("*.py")
                 if p != writer and pattern.search(p.read_text())]
    assert offenders == []
    assert pattern.search(writer.read_text())


def test_pages_with_included_tables_show_the_generated_files():
    """docs/defense-results.md pastes generated tables, docs/performance.md benchmark printouts, between
    markers; each block equals its file, so no number on the page was typed by hand or left
    behind by an older run."""
    from fedcal.pages import include_tables as module

    for name, marker in (("defense-results.md", "<!-- table: "), ("performance.md", "<!-- output: ")):
        assert marker in (ROOT / "docs" / name).read_text()
    pages = [p for p in sorted((ROOT / "docs").glob("*.md")) if "<!-- table: " in p.read_text()
             or "<!-- output: " in p.read_text()]
    assert len(pages) >= 4
    for path in pages:  # every page with included blocks, not only the two named above
        page = path.read_text()
        assert module.refreshed(page) == page, f"run python -m fedcal.pages include_tables docs/{path.name}"
    out = "docs/results/benchmarks/engine_memory.txt"
    fresh = module.refreshed(f"<!-- output: {out} -->\nstale\n<!-- /output -->\n")
    assert fresh == f"<!-- output: {out} -->\n```\n{(ROOT / out).read_text()}```\n<!-- /output -->\n"
    text = "a\n<!-- table: docs/results/defense-mnist/table.md -->\nstale\n<!-- /table -->\nb\n"
    fresh = module.refreshed(text)
    assert "stale" not in fresh and (ROOT / "docs/results/defense-mnist/table.md").read_text() in fresh


def _shipped_checkout(dest: Path) -> Path:
    """A copy of docs/ and the package holding only what git ships (tracked, or new and not ignored): what a
    clean clone has. The checkout itself where it is not a git work tree (an unpacked release) or git is absent."""
    try:
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "docs", "fedcal"], cwd=ROOT,
                                capture_output=True, text=True)
    except OSError:  # no git on this machine
        return ROOT
    if listed.returncode != 0:
        return ROOT
    for name in listed.stdout.splitlines():
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes((ROOT / name).read_bytes())
    return dest


def test_the_built_pages_are_what_their_builder_makes(tmp_path):
    """docs/results.md, results-archive.md, inference.md, inference-results.md, inference-archive.md and
    glance.md are written by ``python -m fedcal.pages build_results`` from the committed tables: a page edited
    by hand, or a builder change never written out, fails here. It runs on a copy without git-ignored files (a
    run's rounds.csv stays out of the repository), so a builder that reads one fails here rather than only on
    a clean clone: the copy's package builds the copy's pages."""
    checkout = _shipped_checkout(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "-m", "fedcal.pages", "build_results", "--check"],
                          cwd=checkout, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def _bins(acc: float) -> pd.DataFrame:
    return pd.DataFrame({"lower": [0.0, 0.5], "upper": [0.5, 1.0], "count": [40, 60], "confidence": [0.3, 0.8],
                         "accuracy": [0.3, acc]})


def test_a_report_over_seeds_says_its_reliability_figure_shows_one_seed(tmp_path, monkeypatch):
    """The τ table over seeds 0 and 1 is a mean; the reliability figure draws one run per panel, so
    its panels name their seed and its caption (and table.md) say it is not the mean; the table
    states sECE's sign from the one shared string. With one seed, no such caption."""
    import fedcal.reports.taus as taus
    from fedcal.reports.markdown import SECE_SIGN

    drawn = {}
    monkeypatch.setattr(taus, "reliability_grid", lambda panels, path, caption="": drawn.update(
        titles=[t for t, _ in panels], caption=caption))
    base = RunConfig(dataset="synthetic", output_dir=str(tmp_path / "runs"), num_rounds=1, eval_every=1)
    dirs = []
    for seed in (1, 0):
        for cfg in (base.replace(attack="none", seed=seed), base.replace(attack="tsa", tau=5.0, seed=seed)):
            d = write_run(cfg, evaluated(0, 0.1, 0.0) + evaluated(1, 0.8 + seed / 10, -0.05))
            _bins(0.7 + seed / 10).to_csv(d / "reliability.csv", index=False)
            dirs.append(d)
    taus.write_report(dirs, tmp_path / "rep")
    assert drawn["titles"] == ["benign (τ=1) (seed 0)", "TSA τ=5 (seed 0)"]
    assert drawn["caption"] == "one run per panel: seed 0, not the mean over seeds 0, 1 that the table shows"
    md = (tmp_path / "rep" / "table.md").read_text()
    assert "(mean ± std over seeds 0, 1)" in md and SECE_SIGN in md and drawn["caption"] in md
    drawn.clear()
    taus.write_report([d for d in dirs if "-s1-" in d.name], tmp_path / "one")
    assert drawn["caption"] == "" and drawn["titles"] == ["benign (τ=1)", "TSA τ=5"]
    assert "one run per panel" not in (tmp_path / "one" / "table.md").read_text()

"""Reports (flwr-free): tables and figures of finished runs, built from the run store only.

* :mod:`~fedcal.reports.markdown` — ``markdown_table``, the one Markdown table writer;
* :mod:`~fedcal.reports.runs` — ``final_metrics``, the one reader of a run's final metrics, and
  ``finished_only``: unfinished or unsound runs are never final (each one left out is named in a
  warning), a run in two directories counts once;
* :mod:`~fedcal.reports.groups` — the grouping rule: a row holds runs that differ only in their seed
  (or a shown axis); other configurations get a ``config`` label naming the keys that differ;
* :mod:`~fedcal.reports.chance` — chance-level models (a binomial test against max(1/K, majority));
* :mod:`~fedcal.reports.taus` — τ comparisons (benign + TSA per τ, under each strategy);
* :mod:`~fedcal.reports.inference` — the robust-federated-inference report;
* :mod:`~fedcal.reports.distill` — RFD-LoRA's tables (Table 1, ablation, communication) and curves;
* :mod:`~fedcal.reports.studies` — analyses of finished runs (post-hoc, triage, similarity, stealth);
* :mod:`~fedcal.reports.sweeps` — a sweep's ``cells.csv`` and ``rounds.csv``;
* :mod:`~fedcal.reports.plots` — every figure, each drawn from a table.
"""

from fedcal.reports.distill import distill_report
from fedcal.reports.inference import (ablation_table, client_accuracies, inference_report,
                                      percent_cell, robust_ranking, seed_table, without_chance, worst_case)
from fedcal.reports.markdown import markdown_table
from fedcal.reports.plots import (defense_bars, inference_curve, posthoc_curves, reliability_grid, similarity_scatter,
                                  stealth_plot, sweep_curves, trajectories, trajectory_table, triage_plot)
from fedcal.reports.runs import final_metrics, final_rows, finished_only
from fedcal.reports.studies import posthoc_table, similarity_table, stealth_markdown, stealth_table, triage_table
from fedcal.reports.sweeps import collect, write_results
from fedcal.reports.taus import seed_summary, seeds_markdown, summarise, task_report, to_markdown, write_report

__all__ = [
    "distill_report", "markdown_table", "final_metrics", "final_rows", "finished_only",
    "summarise", "task_report", "write_report", "seed_summary", "seeds_markdown", "to_markdown",
    "inference_report", "ablation_table", "client_accuracies", "seed_table", "percent_cell", "worst_case",
    "robust_ranking", "without_chance",
    "posthoc_table", "triage_table", "similarity_table", "stealth_table", "stealth_markdown",
    "collect", "write_results",
    "defense_bars", "inference_curve", "posthoc_curves", "reliability_grid", "similarity_scatter", "stealth_plot",
    "sweep_curves", "trajectories", "trajectory_table", "triage_plot",
]

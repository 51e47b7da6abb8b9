"""The builders of the committed pages and claim verdicts (flwr-free apart from the two comparisons that
drive Flower itself): each reads committed tables (docs/results/) or finished run stores and writes a
page, a table or a verdict of docs/. They run from a checkout — the pages they write are the
checkout's — as ``python -m fedcal.pages <builder> [arguments]`` (``python -m fedcal.pages`` lists them).

* the results pages: :mod:`~fedcal.pages.build_results` (docs/results.md, results-archive.md,
  inference.md, inference-results.md, inference-archive.md, glance.md; ``--check``) from
  :mod:`~fedcal.pages.results_sections`, :mod:`~fedcal.pages.results_analyses`,
  :mod:`~fedcal.pages.inference_pages`, :mod:`~fedcal.pages.glance`;
* the claim verdicts: :mod:`~fedcal.pages.tsa_claims` (with :mod:`~fedcal.pages.tsa_rows`),
  :mod:`~fedcal.pages.inference_audit` (with :mod:`~fedcal.pages.inference_claims`),
  :mod:`~fedcal.pages.inference_text`, :mod:`~fedcal.pages.inference_alpha`,
  :mod:`~fedcal.pages.distill_literature`, :mod:`~fedcal.pages.paper_quotes` (every quote the paper's words);
* the tables of single pages: :mod:`~fedcal.pages.table_integrity`, :mod:`~fedcal.pages.include_tables`
  (tables pasted between markers), :mod:`~fedcal.pages.inference_seeds`,
  :mod:`~fedcal.pages.inference_timings`, :mod:`~fedcal.pages.interval_table`,
  :mod:`~fedcal.pages.run_seconds`, :mod:`~fedcal.pages.attacker_data_share`,
  :mod:`~fedcal.pages.closed_loop`, :mod:`~fedcal.pages.detector_replay`,
  :mod:`~fedcal.pages.distill_capacity`, :mod:`~fedcal.pages.distill_skew_diagnosis`,
  :mod:`~fedcal.pages.federated_vs_central`, :mod:`~fedcal.pages.flower_vs_fedcal`,
  :mod:`~fedcal.pages.readme_runs`.
"""

from pathlib import Path

#: the checkout the pages belong to, its docs and its committed result tables
ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RESULTS = DOCS / "results"

"""fedcal/pages/distill_budget_curve.py: the budget table names the cheapest setting (client steps) at
which FedIT and the centralised LoRA on the same texts both come within the margin of capacity."""

from __future__ import annotations

import pandas as pd

from fedcal.pages import distill_budget_curve


def _rows(method, n, e, cas, steps_per):
    return [{"method": method, "per_client": n, "local_epochs": e, "rounds": 0 if method == "central" else i + 1,
             "epochs_seen": (i + 1) * max(e, 1), "steps": (i + 1) * steps_per, "ca": ca, "seconds": 1.0}
            for i, ca in enumerate(cas)]


def test_the_smallest_budget_is_the_fewest_client_steps_where_both_reach_the_goal():
    tool = distill_budget_curve
    runs = pd.DataFrame(_rows("central", 150, 0, [60.0, 75.0, 76.0], 15)
                        + _rows("fedit", 150, 1, [55.0, 70.0, 75.0], 18)
                        + _rows("fedit", 150, 2, [74.7, 76.0], 36) + _rows("central", 300, 0, [76.0], 29)
                        + _rows("fedit", 300, 1, [74.0, 74.5], 30) + _rows("central", 600, 0, [70.0], 58)
                        + _rows("fedit", 600, 1, [75.0], 60))
    text = tool.budget_table(runs, capacity=77.6, within=3.0)
    # n = 150: E = 2 reaches 74.7 ≥ 74.6 after one round (36 steps), before E = 1 (54); n = 300's FedIT
    # never reaches it, n = 600's centralised LoRA never does
    assert "**n = 150 private texts per client, E = 2, 1 rounds** (36 client steps; FedIT CA 74.70 %)" in text
    assert "after 2 epoch(s) (75.00 %)" in text
    assert "| FedIT, n = 150, E = 1 | 55.0 | 70.0 | 75.0 |" in text
    assert "No budget" in tool.budget_table(runs, capacity=80.0, within=3.0)

"""The verdict rules of the TSA claims (:mod:`fedcal.pages.tsa_claims`): each rule by name, stated on the
page and applied here, and the readers of the committed tables the rows are computed from."""

import numpy as np
import pandas as pd

from fedcal.pages import RESULTS

MATCH, DIRECTION, CONTRADICTS, NOT_TESTED = "matches", "direction only", "contradicts", "not tested"

#: the verdict rules, by name: what each checks (stated on the page, applied in code below)
RULES = {
    "sign": "a direction claim **matches** when every seed has the claimed sign, is **direction only** when the "
            "mean over seeds has it but not every seed (or only means are recorded), and **contradicts** when the "
            "mean has the other sign",
    "level": "a number the paper reports as mean ± std matches when fedcal's seed range overlaps the paper's "
             "mean ± its std, and contradicts otherwise",
    "bound": "a bound the paper states (≥ b, above ~ b, below ~ b) matches when every seed (every pair) meets it "
             "within half a unit of the bound's last printed digit, is direction only when the mean does, and "
             "contradicts when the mean misses it",
    "onset": "a claim that something starts around x matches when the first grid point where it is seen lies "
             "within ×1.5 of x either way, is direction only when it is seen elsewhere on the grid, and contradicts "
             "when it is not seen; an accuracy drop is seen where the mean change leaves the paper's own "
             "accuracy-preservation band (< 2 points, its abstract)",
    "majority": "a claim about what a method does matches when it holds in most of the cells measured",
    "monotone": "monotone in τ matches when the mean shift falls at every step of the grid, and is direction only "
                "when a step against it is smaller than the shift's seed spread",
}

def _literature() -> pd.DataFrame:
    return pd.read_csv(RESULTS / "literature" / "tsa.csv").set_index("claim")


def _read(name: str, file: str = "table.csv") -> pd.DataFrame | None:
    path = RESULTS / name / file
    return pd.read_csv(path) if path.exists() else None


def _seeds(values) -> str:
    s = sorted({int(v) for v in values})
    if len(s) > 2 and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}–{s[-1]}"
    return ", ".join(map(str, s))


def _sign_verdict(per_seed: pd.Series, sign: int) -> str:
    """The direction rule on per-seed shifts: every seed, the mean only, or neither."""
    if (np.sign(per_seed) == sign).all():
        return MATCH
    return DIRECTION if np.sign(per_seed.mean()) == sign else CONTRADICTS


def _worse(*verdicts: str) -> str:
    order = [MATCH, DIRECTION, CONTRADICTS]
    return max(verdicts, key=order.index)


def _level_verdict(seeds: pd.Series, value: float, spread: float) -> str:
    """The level rule: fedcal's seed range [min, max] against the paper's mean ± std."""
    return MATCH if seeds.min() <= value + spread and seeds.max() >= value - spread else CONTRADICTS


def _tolerance(bound: float) -> float:
    """Half a unit of the last digit the paper prints the bound with (0.8 -> 0.05, 0.85 -> 0.005, 50 -> 5)."""
    text = f"{bound:g}"
    if "." in text:
        return 0.5 * 10 ** -len(text.split(".")[1])
    return 0.5 * 10 ** (len(text) - len(text.rstrip("0")))


def _bound_verdict(per_unit: pd.Series, bound: float, above: bool = True) -> str:
    """The bound rule: every seed (pair) on the claimed side of the bound, within the paper's printed precision;
    the mean only; or not even the mean."""
    tol = _tolerance(bound)
    meets = (lambda v: v >= bound - tol) if above else (lambda v: v <= bound + tol)
    if meets(per_unit).all():
        return MATCH
    return DIRECTION if meets(per_unit.mean()) else CONTRADICTS


def _onset_verdict(seen_at: list[float], x: float) -> str:
    """The onset rule: the first grid point where the effect is seen, against the paper's "starting around x"."""
    if not seen_at:
        return CONTRADICTS
    return MATCH if x / 1.5 <= min(seen_at) <= 1.5 * x else DIRECTION


def _pm(s: pd.Series, fmt: str = "+.2f") -> str:
    return f"{s.mean():{fmt}} ± {s.std(ddof=1):.2f}" if len(s) > 1 else f"{s.mean():{fmt}}"



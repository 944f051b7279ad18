"""Expected log growth of an account on a regime series, given the exposure it held: the yardstick
without the price noise.

An account's realized log growth over a tail is the sum over bars of ``e * r - (e * vol)^2 / 2``
less its costs, where ``e`` is the exposure held and ``r`` the bar's return. On a regime series
the benchmark knows each bar's state, hence the mean and variance of ``r``; replacing ``r`` by
its mean removes ``e * (r - mean)``, a sum of terms each of zero mean given the past (the
exposure was chosen before the bar), so the expectation is unbiased and far less noisy. Two
rules whose exposures differ where the volatility is high differ in realized growth mostly by
that noise: on `turbulence_regimes`, half a unit of exposure over ~1,000 turbulent bars is
+-0.8 of log growth, against an expected difference of about 0.1 (benchmarks/RESULTS.md).

The bar is split as the generator splits it: a night of ``night_substeps`` sub-steps, when the
exposure of the previous close is held (an order fills at the open), and a day of ``substeps``,
when the exposure of the bar's own close is held. Costs are the engine's, as charged. Crash
kinds are refused: a crash's loss depends on where the stop sits, not on the exposure alone.
"""

from __future__ import annotations

import numpy as np

from envs.synthetic.generators import SyntheticSeries


def expected_log_growth(
    series: SyntheticSeries, first_bar: int, exposure: np.ndarray, cost_share: np.ndarray
) -> float:
    """Expected log growth of an account over bars ``first_bar + 1 .. first_bar + n`` of
    `series`, given its state path and the account's exposures.

    exposure: [n + 1] signed exposure (position value / equity) at the close of bars
    ``first_bar .. first_bar + n``. cost_share: [n] each step's costs / the equity before it.
    Per bar b in state s, with m = drift[s] + vol[s]^2 / 2 (the mean simple return) and night
    share w of the bar's sub-steps: ``w * g(e[b - 1]) + (1 - w) * g(e[b])`` with
    ``g(e) = e * m - (e * vol[s])^2 / 2``, summed, less the costs.
    """
    params = series.params
    if series.family != "regime" or any(p > 0 for p in params["crash_prob"]):
        raise ValueError(f"{series.name}: expected growth needs a crash-free regime series")
    exposure = np.asarray(exposure, dtype=np.float64)  # [n + 1]
    n = len(exposure) - 1
    if len(cost_share) != n or first_bar + n >= len(series.state):
        raise ValueError(
            f"{n + 1} exposures from bar {first_bar} need {n} cost shares (got "
            f"{len(cost_share)}) and bars up to {first_bar + n} (the series has "
            f"{len(series.state)})"
        )
    state = series.state[first_bar + 1 : first_bar + n + 1]  # [n]
    vol = np.asarray(params["vol"])[state]  # [n]
    mean = np.asarray(params["drift"])[state] + 0.5 * vol * vol  # [n] mean simple return
    night = params["night_substeps"] / (params["night_substeps"] + params["substeps"])

    def growth(e: np.ndarray) -> np.ndarray:  # [n] expected log growth at exposure e
        return e * mean - 0.5 * (e * vol) ** 2

    per_bar = night * growth(exposure[:-1]) + (1.0 - night) * growth(exposure[1:])  # [n]
    costs = np.log1p(-np.asarray(cost_share, dtype=np.float64))  # [n] log of what costs leave
    return float(per_bar.sum() + costs.sum())

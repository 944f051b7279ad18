"""The Sharpe ratio, defined once: for the env's episode summaries and for the backtest metrics.

The arithmetic definition, annualised with the square root of time:

    sharpe = mean(r - r_f) / std(r) * sqrt(bars_per_year)

over the per-bar simple returns r, with std the sample standard deviation (ddof=1; the std of
the returns themselves, since subtracting a constant rate would only add rounding). It is NaN at
zero volatility (a flat account has no ratio) and with fewer than two returns.
"""

from __future__ import annotations

import math


def sharpe_ratio(mean_excess: float, std: float, bars_per_year: float) -> float:
    """`mean_excess / std * sqrt(bars_per_year)`; NaN unless `std` (ddof=1) is > 0.

    `std` NaN (fewer than two returns) gives NaN too. NaN is always `math.nan` itself.
    """
    if not std > 0:
        return math.nan
    return mean_excess / std * math.sqrt(bars_per_year)


def sharpe_from_sums(n: float, total: float, total_sq: float, bars_per_year: float) -> float:
    """`sharpe_ratio` of n returns given only their sum and their sum of squares.

    For running sums, as the execution kernel keeps them per episode (no risk-free rate).
    """
    if n < 2:
        return math.nan
    mean = total / n
    variance = max((total_sq - n * mean * mean) / (n - 1), 0.0)
    return sharpe_ratio(mean, math.sqrt(variance), bars_per_year)

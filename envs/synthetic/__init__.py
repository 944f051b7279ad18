"""Synthetic series with a known hidden state, causal filters and reference rules.

The learning benchmark's yardstick (LEARNING.md): `generators` make seeded series whose hidden
state the benchmark knows; `filters` infer that state from past bars only, knowing the
generator's parameters; `references` turn state or belief into the oracle's and the fair
ceiling's actions and run any actions through `envs.TradingEnv`; `estimation` fits a regime
series' parameters to its own bars (the estimated ceiling: what those bars reveal);
`expectation` scores an account by its expected log growth given the exposures it held.
"""

from envs.synthetic.estimation import (
    RegimeFit,
    ReversionFit,
    estimated_series,
    fit_regimes,
    fit_reversion,
)
from envs.synthetic.expectation import expected_log_growth
from envs.synthetic.filters import belief, kalman_deviation, regime_posterior
from envs.synthetic.generators import (
    GENERATORS,
    STRUCTURED_KINDS,
    SyntheticSeries,
    crash_risk,
    generate,
    mean_reversion,
    random_walk,
    trend_regimes,
    turbulence_regimes,
    volatility_regimes,
)
from envs.synthetic.references import (
    KNOB_GRID,
    Knobs,
    ceiling_actions,
    oracle_actions,
    rule_actions,
    tune_knobs,
)
from envs.synthetic.runs import RunResult, buy_and_hold_actions, buy_and_hold_growth, run_actions

__all__ = [
    "GENERATORS",
    "KNOB_GRID",
    "STRUCTURED_KINDS",
    "Knobs",
    "RegimeFit",
    "ReversionFit",
    "RunResult",
    "SyntheticSeries",
    "belief",
    "buy_and_hold_actions",
    "buy_and_hold_growth",
    "ceiling_actions",
    "crash_risk",
    "estimated_series",
    "expected_log_growth",
    "fit_regimes",
    "fit_reversion",
    "generate",
    "kalman_deviation",
    "mean_reversion",
    "oracle_actions",
    "random_walk",
    "regime_posterior",
    "rule_actions",
    "run_actions",
    "trend_regimes",
    "tune_knobs",
    "turbulence_regimes",
    "volatility_regimes",
]

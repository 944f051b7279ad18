"""Seeded generators of OHLCV series with a hidden state that the benchmark knows.

Each generator is ``f(n_bars, seed, **params) -> SyntheticSeries``. Bars come from a continuous
log-price path on `substeps` traded sub-steps per bar after a short unobserved night
(`envs.synthetic.paths`). Units are per bar (252 bars a year); drifts are of the log price.

Two model families, named by ``params["family"]``:

* ``"regime"``: a hidden Markov chain ``state[t]`` in 0..K-1 sets bar t's log drift, volatility
  and crash probability (``params["drift"]``, ``["vol"]``, ``["crash_prob"]``, per state;
  ``["transition"][i][j]`` = P(state j next | state i now)). A bar's close-to-close log return is
  ``N(drift, vol^2)`` plus, in a crash bar, a drop ``log(1 - c)``, c uniform in log space on
  ``params["crash_size"]``. Kinds: `random_walk` (K = 1), `trend_regimes`,
  `volatility_regimes`, `crash_risk`, `turbulence_regimes`.
* ``"ou"``: `mean_reversion`; the log price is ``log(level) + d + u`` where ``d`` (the state) is
  a slow Ornstein-Uhlenbeck deviation and ``u`` a fast one: at bar frequency ``d`` is AR(1) with
  coefficient ``params["phi"]`` and ``u`` is nearly independent noise of std
  ``params["noise_sd"]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from envs.market_data import MarketData
from envs.synthetic import paths

BASE_VOLUME = 1e6  # median volume of a calm bar


@dataclass(frozen=True, eq=False)
class SyntheticSeries:
    """Generated bars with the hidden state behind each one and the generator's parameters.

    `params` holds everything a fair observer may know (the model, never the path); `state` is
    what only the oracle knows.
    """

    name: str  # generator kind, e.g. "trend_regimes"
    market: MarketData  # the bars, business days from 2000-01-03
    state: np.ndarray  # [T] hidden state of each bar: regime index (int64) or deviation d_t
    params: Mapping[str, Any]  # read-only; see the module doc for the keys of each family

    @property
    def family(self) -> str:
        """``"regime"`` or ``"ou"``: which filter and reference model fit this series."""
        return str(self.params["family"])


def random_walk(
    n_bars: int,
    seed: int,
    *,
    drift: float = 0.0002,  # log drift per bar (5% a year: Kelly ~1x after financing)
    vol: float = 0.01,  # per bar (16% a year)
    substeps: int = 64,
    night_share: float = 0.1,
) -> SyntheticSeries:
    """A log-price random walk with constant drift and volatility: nothing to find."""
    return _regime_series(
        "random_walk",
        n_bars,
        seed,
        state_names=("walk",),
        drift=(drift,),
        vol=(vol,),
        transition=((1.0,),),
        substeps=substeps,
        night_share=night_share,
    )


def trend_regimes(
    n_bars: int,
    seed: int,
    *,
    drift: float = 0.0015,  # |log drift| per bar of either trend (38% a year)
    vol: float = 0.01,  # per bar, both regimes
    mean_spell: float = 60.0,  # bars a trend lasts on average (geometric)
    substeps: int = 64,
    night_share: float = 0.1,
) -> SyntheticSeries:
    """Trends of drift -`drift` (state 0) and +`drift` (state 1) that flip: a direction task."""
    switch = 1.0 / mean_spell
    return _regime_series(
        "trend_regimes",
        n_bars,
        seed,
        state_names=("down", "up"),
        drift=(-drift, drift),
        vol=(vol, vol),
        transition=((1.0 - switch, switch), (switch, 1.0 - switch)),
        substeps=substeps,
        night_share=night_share,
        mean_spell=mean_spell,
    )


def volatility_regimes(
    n_bars: int,
    seed: int,
    *,
    vols: tuple[float, float] = (0.01, 0.03),  # calm, turbulent per bar (16%, 48% a year)
    **params: Any,
) -> SyntheticSeries:
    """Calm (state 0) and turbulent (state 1) spells under one expected return: a leverage task.

    The growth-optimal leverage ``mean_return / vol^2`` is 8x calm (6x after 5% financing on the
    borrowed part, so the top level, 5x, by default) and 0.9x turbulent. Under a 1x cap it is 1x
    in both: see `turbulence_regimes` for the task a capped agent can show. `params`: those of
    `_volatility_series`.
    """
    return _volatility_series("volatility_regimes", n_bars, seed, vols=vols, **params)


def turbulence_regimes(
    n_bars: int,
    seed: int,
    *,
    vols: tuple[float, float] = (0.01, 0.05),  # calm, turbulent per bar (16%, 79% a year)
    **params: Any,
) -> SyntheticSeries:
    """`volatility_regimes` with turbulent spells violent enough to de-lever in: a leverage task
    that an agent capped at 1x can show.

    The growth-optimal leverage is 8x calm and 0.32x turbulent. At levels of 0.5x and 1x the best
    is 1x calm and 0.5x turbulent, where a bar's expected log growth is +0.009% at 0.5x, 0 flat and
    -0.045% at 1x (``L * mean_return - (L * vol)^2 / 2``): the leverage head has to read the
    volatility level, and buy-and-hold loses the most in exactly the spells it can see coming.
    `params`: those of `_volatility_series`.
    """
    return _volatility_series("turbulence_regimes", n_bars, seed, vols=vols, **params)


def _volatility_series(
    kind: str,
    n_bars: int,
    seed: int,
    *,
    vols: tuple[float, float],
    mean_return: float = 0.0008,  # expected simple return per bar, both regimes (20% a year)
    mean_spells: tuple[float, float] = (80.0, 40.0),  # calm, turbulent mean spell in bars
    substeps: int = 64,
    night_share: float = 0.1,
) -> SyntheticSeries:
    """Calm (state 0) and turbulent (state 1) spells of volatilities `vols` under one expected
    simple return per bar: the log drift of each is ``mean_return - vol^2 / 2``."""
    log_drifts = tuple(mean_return - 0.5 * v * v for v in vols)  # E[simple return] is constant
    return _regime_series(
        kind,
        n_bars,
        seed,
        state_names=("calm", "turbulent"),
        drift=log_drifts,
        vol=tuple(vols),
        transition=_two_state_transition(mean_spells),
        substeps=substeps,
        night_share=night_share,
        mean_return=mean_return,
        mean_spells=tuple(mean_spells),
    )


def crash_risk(
    n_bars: int,
    seed: int,
    *,
    drifts: tuple[float, float] = (0.0004, 0.003),  # calm, fragile log drift per bar
    vols: tuple[float, float] = (0.01, 0.011),  # calm, fragile per bar
    mean_spells: tuple[float, float] = (100.0, 40.0),  # calm, fragile mean spell in bars
    crash_prob: float = 0.02,  # per fragile bar
    crash_size: tuple[float, float] = (0.10, 0.20),  # drop as a share of the price
    overnight_share: float = 0.4,  # crashes that happen overnight (a gap no stop can help)
    crash_substeps: int = 8,  # sub-steps an intraday crash slides over
    substeps: int = 64,
    night_share: float = 0.1,
) -> SyntheticSeries:
    """Calm (state 0) and fragile (state 1) spells; fragile bars crash with `crash_prob`.

    An intraday crash is a fast but continuous slide over `crash_substeps` sub-steps, so a stop
    below the price is filled near its level; an overnight one is an opening gap no stop helps.
    The fragile drift about pays for the crashes on average, so there an unprotected long earns
    little, a short loses, and a long with a tight stop earns most: a task for the risk head.
    """
    return _regime_series(
        "crash_risk",
        n_bars,
        seed,
        state_names=("calm", "fragile"),
        drift=tuple(drifts),
        vol=tuple(vols),
        transition=_two_state_transition(mean_spells),
        crash_prob=(0.0, crash_prob),
        crash_size=crash_size,
        crash_overnight_share=overnight_share,
        crash_substeps=crash_substeps,
        substeps=substeps,
        night_share=night_share,
        mean_spells=tuple(mean_spells),
    )


def mean_reversion(
    n_bars: int,
    seed: int,
    *,
    level: float = 100.0,  # the price the deviation reverts to (known)
    half_life: float = 10.0,  # bars for the deviation d to halve on average
    deviation_sd: float = 0.04,  # stationary std of d (log units)
    noise_sd: float = 0.004,  # stationary std of the fast noise u (log units)
    noise_half_life: float = 0.2,  # bars: u is nearly independent from one close to the next
    substeps: int = 64,
    night_share: float = 0.1,
) -> SyntheticSeries:
    """Log price ``log(level) + d + u``: a hidden OU deviation d seen through small noise u."""
    rng = _rng("mean_reversion", seed)
    n_night = paths.night_substeps(substeps, night_share)
    n_steps = n_night + substeps
    dt = 1.0 / n_steps
    a_d, a_u = 2.0 ** (-dt / half_life), 2.0 ** (-dt / noise_half_life)  # per sub-step
    d0 = deviation_sd * rng.standard_normal()
    u0 = noise_sd * rng.standard_normal()
    shocks = rng.standard_normal((2, n_bars, n_steps))  # [2, T, S]
    d = paths.ar1_path(deviation_sd * math.sqrt(1.0 - a_d * a_d) * shocks[0], a_d, d0)  # [T, S]
    u = paths.ar1_path(noise_sd * math.sqrt(1.0 - a_u * a_u) * shocks[1], a_u, u0)  # [T, S]
    phi = 2.0 ** (-1.0 / half_life)
    params = _params(
        family="ou",
        level=math.log(level),
        phi=phi,
        deviation_sd=deviation_sd,
        noise_sd=noise_sd,
        half_life=half_life,
        noise_half_life=noise_half_life,
        substeps=substeps,
        night_substeps=n_night,
    )
    activity = np.ones(n_bars)  # [T]
    return SyntheticSeries(
        name="mean_reversion",
        market=paths.make_market(
            f"<synthetic:mean_reversion seed={seed}>",
            "SYN-MEANREV",
            math.log(level) + d + u,
            n_night,
            paths.lognormal_volume(rng, BASE_VOLUME, activity),
        ),
        state=_read_only(d[:, -1]),  # [T] deviation at each close
        params=params,
    )


GENERATORS: Mapping[str, Callable[..., SyntheticSeries]] = MappingProxyType(
    {
        "random_walk": random_walk,
        "trend_regimes": trend_regimes,
        "volatility_regimes": volatility_regimes,
        "mean_reversion": mean_reversion,
        "crash_risk": crash_risk,
        "turbulence_regimes": turbulence_regimes,  # last: each kind's noise follows its index
    }
)
STRUCTURED_KINDS = (
    "trend_regimes",
    "volatility_regimes",
    "mean_reversion",
    "crash_risk",
    "turbulence_regimes",
)


def generate(kind: str, n_bars: int, seed: int, **params: Any) -> SyntheticSeries:
    """The series of generator `kind` (a key of `GENERATORS`) with these keyword parameters."""
    if kind not in GENERATORS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(GENERATORS)}")
    return GENERATORS[kind](n_bars, seed, **params)


def stationary_distribution(transition: np.ndarray) -> np.ndarray:
    """[K] the stationary distribution of a row-stochastic transition matrix [K, K]."""
    k = len(transition)
    system = np.vstack([transition.T - np.eye(k), np.ones(k)])  # [K + 1, K]
    target = np.zeros(k + 1)
    target[-1] = 1.0
    return np.linalg.lstsq(system, target, rcond=None)[0]


def _regime_series(
    kind: str,
    n_bars: int,
    seed: int,
    *,
    state_names: tuple[str, ...],
    drift: tuple[float, ...],
    vol: tuple[float, ...],
    transition: tuple[tuple[float, ...], ...],
    substeps: int,
    night_share: float,
    crash_prob: tuple[float, ...] | None = None,
    crash_size: tuple[float, float] = (0.08, 0.20),
    crash_overnight_share: float = 0.0,
    crash_substeps: int = 8,
    **extra: Any,
) -> SyntheticSeries:
    """Simulate a hidden-Markov regime series (see the module doc, family ``"regime"``)."""
    if n_bars < 2:
        raise ValueError(f"n_bars must be >= 2, got {n_bars}")
    if not 1 <= crash_substeps <= substeps:
        raise ValueError(f"crash_substeps must be in [1, substeps], got {crash_substeps}")
    rng = _rng(kind, seed)
    crash_prob = crash_prob or (0.0,) * len(drift)
    matrix = np.asarray(transition, dtype=np.float64)  # [K, K]
    state = _markov_chain(rng, matrix, n_bars)  # [T]
    n_night = paths.night_substeps(substeps, night_share)
    n_steps = n_night + substeps
    increments = paths.brownian_increments(
        rng, np.asarray(drift)[state], np.asarray(vol)[state], n_steps
    )  # [T, S]
    crashed = rng.random(n_bars) < np.asarray(crash_prob)[state]  # [T]
    _add_crashes(
        rng, increments, crashed, crash_size, crash_overnight_share, crash_substeps, n_night
    )
    log_path = math.log(100.0) + np.cumsum(increments.ravel()).reshape(n_bars, n_steps)  # [T, S]
    activity = (np.asarray(vol) / min(vol))[state] * np.where(crashed, 3.0, 1.0)  # [T]
    params = _params(
        family="regime",
        state_names=state_names,
        drift=tuple(drift),
        vol=tuple(vol),
        transition=tuple(tuple(row) for row in transition),
        crash_prob=tuple(crash_prob),
        crash_size=tuple(crash_size),
        crash_overnight_share=crash_overnight_share,
        crash_substeps=crash_substeps,
        substeps=substeps,
        night_substeps=n_night,
        **extra,
    )
    return SyntheticSeries(
        name=kind,
        market=paths.make_market(
            f"<synthetic:{kind} seed={seed}>",
            f"SYN-{kind.split('_')[0].upper()}",
            log_path,
            n_night,
            paths.lognormal_volume(rng, BASE_VOLUME, activity),
        ),
        state=_read_only(state),
        params=params,
    )


def _markov_chain(rng: np.random.Generator, transition: np.ndarray, n_bars: int) -> np.ndarray:
    """[T] int64 states of a Markov chain started from its stationary distribution."""
    cumulative = np.cumsum(transition, axis=1).tolist()  # [K][K]
    start = np.cumsum(stationary_distribution(transition))  # [K]
    draws = rng.random(n_bars).tolist()
    state = np.empty(n_bars, dtype=np.int64)
    current = min(int(np.searchsorted(start, draws[0], side="right")), len(start) - 1)
    state[0] = current
    for t in range(1, n_bars):
        row = cumulative[current]
        current = next((j for j, c in enumerate(row) if draws[t] < c), len(row) - 1)
        state[t] = current
    return state


def _add_crashes(
    rng: np.random.Generator,
    increments: np.ndarray,
    crashed: np.ndarray,
    size: tuple[float, float],
    overnight_share: float,
    slide_steps: int,
    n_night: int,
) -> None:
    """Add each crash's log drop to `increments` [T, S] in place: spread over the night, or
    over `slide_steps` consecutive day sub-steps starting at a random sub-step."""
    bars = np.flatnonzero(crashed)  # [C]
    if len(bars) == 0:
        return
    drops = rng.uniform(math.log(1.0 - size[1]), math.log(1.0 - size[0]), len(bars))  # [C] < 0
    overnight = rng.random(len(bars)) < overnight_share  # [C]
    n_day = increments.shape[1] - n_night
    first = n_night + rng.integers(0, n_day - slide_steps + 1, len(bars))  # [C]
    increments[bars[overnight], :n_night] += drops[overnight, None] / n_night
    day = ~overnight
    columns = first[day, None] + np.arange(slide_steps)  # [C_day, slide_steps]
    increments[bars[day, None], columns] += drops[day, None] / slide_steps


def _two_state_transition(mean_spells: tuple[float, float]) -> tuple[tuple[float, ...], ...]:
    """Transition matrix of two states whose spells last `mean_spells` bars on average."""
    leave = tuple(1.0 / max(spell, 1.0) for spell in mean_spells)
    return ((1.0 - leave[0], leave[0]), (leave[1], 1.0 - leave[1]))


def _rng(kind: str, seed: int) -> np.random.Generator:
    """A generator of its own for each (kind, seed): kinds with one seed do not share noise."""
    return np.random.default_rng([list(GENERATORS).index(kind), seed])


def _params(**values: Any) -> Mapping[str, Any]:
    return MappingProxyType(dict(values))


def _read_only(values: np.ndarray) -> np.ndarray:
    values = np.ascontiguousarray(values)
    values.flags.writeable = False
    return values

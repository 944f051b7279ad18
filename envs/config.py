"""Environment configuration (one dataclass, every field documented where it is declared) and
the names of the action's parts, which every other package imports from here."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Literal

from envs.features import feature_names

RewardKind = Literal["log_return", "differential_sharpe", "drawdown_penalty"]
HEAD_NAMES = ("direction", "leverage", "risk")  # the action's dimensions in order, one head each
DIRECTION_SIDES = {"short": -1, "flat": 0, "long": 1}  # `direction` level -> position side


@dataclass
class EnvConfig:
    """Market, execution and reward settings of a `TradingEnv` (and of the batched env)."""

    window: int = (
        64  # bars of market features in one observation (bar t and the window-1 before it)
    )
    long_only: bool = False  # True drops `short`: the direction head chooses flat / long only
    leverage_levels: tuple[float, ...] = (1.0, 2.0, 3.0, 5.0)  # position notional / equity
    risk_levels: tuple[float, ...] = (0.01, 0.02, 0.05, 0.10)  # equity share lost before the stop
    initial_equity: float = 100_000.0  # account equity at the start of every episode
    commission_bps: float = 2.0  # commission on traded notional, basis points
    slippage_bps: float = 1.0  # fill price moved against the trader, basis points
    financing_rate_annual: float = 0.05  # interest on borrowed cash of a leveraged long, per year
    borrow_fee_annual: float = 0.01  # fee on the notional of a short position, per year
    maintenance_margin: float = 0.05  # equity / notional below which the position is liquidated
    bars_per_year: float | None = None  # for annual rates; None infers it from the timestamps
    episode_length: int | None = 256  # bars per training episode; None runs to the end of the range
    random_start: bool = True  # training: start at a random bar; False starts at the first bar
    reward: RewardKind = "log_return"  # log equity change; or differential Sharpe; or DD-penalised
    sharpe_eta: float = 0.01  # differential Sharpe: adaptation rate of its moving moments
    drawdown_penalty: float = 1.0  # drawdown_penalty: weight on each increase of the drawdown
    turnover_penalty: float = 0.0  # reward only, any kind: minus this x order notional / equity
    resize_band: float = 0.0  # a new leverage resizes only if held exposure is off by > band x it
    resize_penalty: float = 0.0  # reward only: minus this x the notional / equity of a resize
    decision_interval: int = 1  # bars per decision: the account holds on the k - 1 bars between
    volume_window: int = 64  # past bars used to normalise volume and volatility (causal)
    momentum_horizons: tuple[int, ...] = ()  # bars of each `momentum_<h>` feature (envs.features)
    # Annualised volatility a position is sized to: a leverage level L buys an exposure of
    # L x min(1, volatility_target / vol_t), vol_t the causal RMS volatility of the last
    # `volatility_target_window` bars at the decision bar (`envs.features.volatility_scale`);
    # null sizes to the level itself.
    volatility_target: float | None = None
    volatility_target_window: int = 10  # short, so sizing follows a regime change within days

    def __post_init__(self) -> None:
        self.leverage_levels = tuple(float(x) for x in self.leverage_levels)
        self.risk_levels = tuple(float(x) for x in self.risk_levels)
        self.momentum_horizons = tuple(self.momentum_horizons)
        self.validate()

    def validate(self) -> None:
        """Raise `ValueError` naming the key when a value is out of its range."""
        checks: list[tuple[str, bool, str]] = [
            ("window", self.window >= 2, "an integer >= 2"),
            ("leverage_levels", len(self.leverage_levels) >= 1, "at least one level"),
            ("leverage_levels", all(x > 0 for x in self.leverage_levels), "levels > 0"),
            (
                "leverage_levels",
                len(set(self.leverage_levels)) == len(self.leverage_levels),
                "distinct levels",
            ),
            ("risk_levels", len(self.risk_levels) >= 1, "at least one level"),
            ("risk_levels", all(x > 0 for x in self.risk_levels), "levels > 0"),
            ("risk_levels", len(set(self.risk_levels)) == len(self.risk_levels), "distinct levels"),
            ("initial_equity", self.initial_equity > 0, "a positive number"),
            ("commission_bps", self.commission_bps >= 0, "a number >= 0"),
            ("slippage_bps", self.slippage_bps >= 0, "a number >= 0"),
            ("financing_rate_annual", self.financing_rate_annual >= 0, "a number >= 0"),
            ("borrow_fee_annual", self.borrow_fee_annual >= 0, "a number >= 0"),
            ("maintenance_margin", 0 <= self.maintenance_margin < 1, "a number in [0, 1)"),
            (
                "maintenance_margin",
                self.maintenance_margin * max(self.leverage_levels, default=0.0) < 1,
                "maintenance_margin * max(leverage_levels) < 1 (a new position must not start "
                "below maintenance)",
            ),
            (
                "bars_per_year",
                self.bars_per_year is None or self.bars_per_year > 0,
                "a positive number or null",
            ),
            (
                "episode_length",
                self.episode_length is None or self.episode_length >= 1,
                "an integer >= 1 or null",
            ),
            (
                "reward",
                self.reward in ("log_return", "differential_sharpe", "drawdown_penalty"),
                "one of log_return, differential_sharpe, drawdown_penalty",
            ),
            ("sharpe_eta", 0 < self.sharpe_eta < 1, "a number in (0, 1)"),
            ("drawdown_penalty", self.drawdown_penalty >= 0, "a number >= 0"),
            ("turnover_penalty", self.turnover_penalty >= 0, "a number >= 0"),
            ("resize_band", 0 <= self.resize_band < 1, "a number in [0, 1)"),
            (
                "resize_band",
                self.resize_band < self.max_resize_band,
                f"a number < {self.max_resize_band:g} with leverage_levels "
                f"{list(self.leverage_levels)} (a held position resizes to a higher level only "
                "when the gap exceeds band x that level, so a wider band blocks a step up)",
            ),
            ("resize_penalty", self.resize_penalty >= 0, "a number >= 0"),
            (
                "decision_interval",
                isinstance(self.decision_interval, int)
                and not isinstance(self.decision_interval, bool)
                and self.decision_interval >= 1,
                "an integer >= 1",
            ),
            ("volume_window", self.volume_window >= 2, "an integer >= 2"),
            (
                "volatility_target",
                self.volatility_target is None or self.volatility_target > 0,
                "a positive number (annualised, e.g. 0.2 for 20% a year) or null",
            ),
            ("volatility_target_window", self.volatility_target_window >= 2, "an integer >= 2"),
            (
                "momentum_horizons",
                all(
                    isinstance(h, int) and not isinstance(h, bool) and h >= 1
                    for h in self.momentum_horizons
                )
                and len(set(self.momentum_horizons)) == len(self.momentum_horizons),
                "a list of distinct integers >= 1",
            ),
        ]
        for key, ok, expected in checks:
            if not ok:
                raise ValueError(f"env.{key}: expected {expected}, got {getattr(self, key)!r}")

    @property
    def max_resize_band(self) -> float:
        """The widest `resize_band` (exclusive) at which a held position can still be resized up
        one leverage level: ``min(1 - lower / higher)`` over adjacent levels (1 for one level).

        A held position at level ``a`` resizes to ``b`` when ``|b - a| > resize_band * b``, so with
        levels 0.5, 1, 2 a band of 0.5 or more could never lift a 1x position to 2x.
        """
        levels = sorted(self.leverage_levels)
        return min((1.0 - lo / hi for lo, hi in itertools.pairwise(levels)), default=1.0)

    @property
    def feature_names(self) -> tuple[str, ...]:
        """Names of the market features per bar, in observation order (`envs.features`)."""
        return feature_names(self.momentum_horizons)

    @property
    def direction_names(self) -> tuple[str, ...]:
        """Names of the direction levels in action-index order."""
        names = tuple(DIRECTION_SIDES)
        return names[1:] if self.long_only else names

    @property
    def direction_sides(self) -> tuple[int, ...]:
        """Position side (-1, 0, +1) of each direction level."""
        return tuple(DIRECTION_SIDES[name] for name in self.direction_names)

    @property
    def flat_direction_index(self) -> int:
        """Action index of `flat` in the direction head."""
        return self.direction_names.index("flat")

    @property
    def hold_action(self) -> tuple[int, int, int]:
        """Action indices of buy-and-hold in this action space: long, at the leverage level
        nearest 1x, with the widest stop (the no-stop level when there is one)."""
        levels = [abs(level - 1.0) for level in self.leverage_levels]
        risks = list(self.risk_levels)
        return (
            self.direction_names.index("long"),
            levels.index(min(levels)),
            risks.index(max(risks)),
        )

    @property
    def action_sizes(self) -> tuple[int, int, int]:
        """Sizes of the `direction`, `leverage` and `risk` action dimensions."""
        return (len(self.direction_names), len(self.leverage_levels), len(self.risk_levels))

"""report.png shows what the agent held next to what it chose: a long chosen at 5x drifts down."""

import numpy as np
import pandas as pd

from envs import TradingEnv
from training.evaluation.report import (
    AGENT,
    CHOSEN_LEVERAGE,
    HELD_EXPOSURE,
    render_report,
    report_figure,
)
from training.evaluation.rollout import record_episode


def rising_market(n: int = 40) -> pd.DataFrame:
    """Closes rising 3% a bar: a long held at 5x carries less and less exposure."""
    close = 100.0 * 1.03 ** np.arange(n)
    open_ = np.concatenate([[100.0], close[:-1]])
    return pd.DataFrame(
        {
            "Date": pd.date_range("2020-01-01", periods=n, freq="D"),
            "Open": open_,
            "High": np.maximum(open_, close) * 1.001,
            "Low": np.minimum(open_, close) * 0.999,
            "Close": close,
            "Volume": 1e6,
        }
    )


def test_the_leverage_panel_plots_the_held_exposure_next_to_the_chosen_level():
    env = TradingEnv(rising_market(), window=2, random_start=False, episode_length=None)
    long_5x = np.array([2, 3, 3])  # long, leverage 5x, risk 10%: chosen once, then unchanged
    record = record_episode(env, lambda obs: long_5x)
    held = record["exposure"].to_numpy()
    assert held[2] < 5.0 and held[-1] < 2.1  # it drifted from 5x as the price rose

    figure = report_figure({AGENT: record}, "title")
    leverage_axis = next(ax for ax in figure.axes if ax.get_ylabel() == "leverage (x)")
    lines = {line.get_label(): line for line in leverage_axis.get_lines()}
    assert set(lines) == {CHOSEN_LEVERAGE, HELD_EXPOSURE}
    chosen = np.asarray(lines[CHOSEN_LEVERAGE].get_ydata(), dtype=float)
    np.testing.assert_array_equal(chosen[1:], 5.0)  # the level the agent asked for
    np.testing.assert_allclose(lines[HELD_EXPOSURE].get_ydata(), np.abs(held))
    assert [t.get_text() for t in leverage_axis.get_legend().get_texts()] == [
        CHOSEN_LEVERAGE,
        HELD_EXPOSURE,
    ]
    assert render_report({AGENT: record}, "title")[:8] == b"\x89PNG\r\n\x1a\n"

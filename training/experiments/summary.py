"""Read a sweep's finished run folders into one table, aggregate it, and choose on validation.

- `read_run(run_dir)`: one trial's figures from its ordinary run folder: the best validation
  entry of `validation.json` (the model the test backtest used), the agent's and buy-and-hold's
  test metrics from `report/metrics.json`, and the skewness / kurtosis of the agent's per-bar
  test returns from `report/equity.csv`.
- `aggregate(rows, ...)`: per config, the median, IQR and worst over seeds of the test Sharpe, the
  test return and the validation Sharpe; the best config chosen on **validation only** (highest
  median validation Sharpe), its test figures, and its deflated Sharpe ratio for the number of
  configs tried (`training.evaluation.selection`). Test figures never enter the choice.
- `selection_text`, `render` (summary.png) and `write_outputs` (summary.csv/json/png).
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from training.evaluation.selection import (
    best_pass,
    deflated_sharpe_ratio,
    per_bar_sharpe,
    probability_of_backtest_overfitting,
)
from training.experiments.files import write_atomic, write_json_atomic
from training.experiments.plan import Plan, attempts, finished_run

NAN = math.nan
PBO_BLOCKS = 8  # CSCV blocks: C(8, 4) = 70 splits
# Columns of summary.csv after the sampled keys (the run folder last).
FIGURES = (
    "validation_sharpe",  # best validation Sharpe of the run (its best_model.safetensors)
    "validation_return_pct",  # total return of that validation pass, %
    "validation_timesteps",  # training timesteps at that pass
    "train_episode_sharpe",  # training episodes' Sharpe at that pass (NaN if not logged)
    "generalization_gap",  # train-episode Sharpe minus validation Sharpe (NaN if not logged)
    "test_sharpe",  # agent on the test split (annualised)
    "test_return_pct",
    "test_max_drawdown_pct",
    "buy_and_hold_test_sharpe",
    "buy_and_hold_test_return_pct",
    "test_bars",
    "test_years",
    "test_return_skew",  # of the agent's per-bar test returns
    "test_return_kurtosis",  # non-excess (3 for normal returns)
)


def _number(value: Any) -> float:
    """`value` as a float; NaN for None or anything not numeric."""
    try:
        return NAN if value is None else float(value)
    except (TypeError, ValueError):
        return NAN


def best_validation(history: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The validation entry the run kept: the best finite score (`train.select_by`; the first of
    equals), or {}."""
    best = best_pass(history)
    return {} if best is None else dict(history[best])


def test_returns(run_dir: Path) -> np.ndarray | None:
    """The agent's per-bar simple returns on the test split (`report/equity.csv`), or None."""
    try:
        equity = pd.read_csv(run_dir / "report" / "equity.csv", usecols=["equity"])["equity"]
    except (OSError, ValueError, KeyError):
        return None
    wealth = np.maximum(equity.to_numpy(dtype=float), 0.0)
    prev = wealth[:-1]
    return np.divide(wealth[1:], prev, out=np.ones_like(prev), where=prev > 0) - 1.0


def _moments(returns: np.ndarray | None) -> tuple[float, float]:
    """Skewness and non-excess kurtosis (population moments) of `returns`; NaN when undefined."""
    if returns is None or len(returns) < 3:
        return NAN, NAN
    centred = returns - returns.mean()
    var = float(np.mean(centred**2))
    if var <= 0:
        return NAN, NAN
    return float(np.mean(centred**3)) / var**1.5, float(np.mean(centred**4)) / var**2


def read_run(run_dir: Path) -> tuple[dict[str, float], np.ndarray | None]:
    """The `FIGURES` of a run folder (NaN where a file or field is missing) and its per-bar
    test returns (None without `report/equity.csv`)."""
    try:
        history = json.loads((run_dir / "validation.json").read_text())
    except (OSError, ValueError):
        history = []
    try:
        test = json.loads((run_dir / "report" / "metrics.json").read_text())
    except (OSError, ValueError):
        test = {}
    best = best_validation(history if isinstance(history, list) else [])
    agent, hold = test.get("agent", {}), test.get("buy_and_hold", {})
    returns = test_returns(run_dir)
    skew, kurtosis = _moments(returns)
    figures = {
        "validation_sharpe": _number(best.get("sharpe")),
        "validation_return_pct": _number(best.get("total_return_pct")),
        "validation_timesteps": _number(best.get("timesteps")),
        "train_episode_sharpe": _number(best.get("train_episode_sharpe")),
        "generalization_gap": _number(best.get("generalization_gap")),
        "test_sharpe": _number(agent.get("sharpe")),
        "test_return_pct": _number(agent.get("total_return_pct")),
        "test_max_drawdown_pct": _number(agent.get("max_drawdown_pct")),
        "buy_and_hold_test_sharpe": _number(hold.get("sharpe")),
        "buy_and_hold_test_return_pct": _number(hold.get("total_return_pct")),
        "test_bars": _number(agent.get("bars")),
        "test_years": _number(agent.get("years")),
        "test_return_skew": skew,
        "test_return_kurtosis": kurtosis,
    }
    return figures, returns


def collect(
    plan: Plan, out: Path, status: Mapping[str, Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, np.ndarray | None]]:
    """One row per planned trial (ids, seed, status, sampled keys, `FIGURES`, error, run folder)
    and each trial's per-bar test returns. A trial is 'done' when a run folder of it finished;
    else 'failed' or 'stopped' as `status` (OUT/status.json) records; else 'not run'."""
    rows: list[dict[str, Any]] = []
    returns: dict[str, np.ndarray | None] = {}
    for trial in plan.trials:
        ledger = status.get(trial.trial_id, {})
        run_dir = finished_run(out, trial.trial_id)
        state = "done" if run_dir else ledger.get("status", "not run")
        if state not in ("failed", "stopped", "done"):
            state = "not run"
        if run_dir is None:
            tried = attempts(out, trial.trial_id)
            run_dir = Path(ledger["run_dir"]) if ledger.get("run_dir") else None
            run_dir = run_dir or (tried[-1] if tried else None)
        if run_dir is not None:
            figures, returns[trial.trial_id] = read_run(run_dir)
        else:
            figures, returns[trial.trial_id] = dict.fromkeys(FIGURES, NAN), None
        rows.append(
            {
                "trial_id": trial.trial_id,
                "config_id": trial.config_id,
                "seed": trial.seed,
                "status": state,
                **trial.params,
                **figures,
                "error": (ledger.get("error") or "") if state == "failed" else "",
                "run_dir": str(run_dir or ""),
            }
        )
    return rows, returns


# --- aggregation ------------------------------------------------------------------------------


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Median, IQR (75th minus 25th percentile), worst (min) and the finite values themselves."""
    finite = [float(v) for v in values if math.isfinite(v)]
    if not finite:
        return {"median": NAN, "iqr": NAN, "worst": NAN, "values": []}
    q25, q50, q75 = np.percentile(finite, [25, 50, 75])
    return {"median": float(q50), "iqr": float(q75 - q25), "worst": min(finite), "values": finite}


def _median(values: Sequence[float]) -> float:
    return spread(values)["median"]


def _deflated_sharpe(
    best: Sequence[Mapping[str, Any]], per_config: dict[str, dict[str, Any]], n_configs: int
) -> dict[str, Any]:
    """DSR of the best config's median test Sharpe (the inputs, and the value)."""
    bars = _median([r["test_bars"] for r in best])
    years = _median([r["test_years"] for r in best])
    if not (bars > 1 and years > 0):
        return {"dsr": NAN}
    bars_per_year = bars / years
    sharpes = [
        per_bar_sharpe(c["test_sharpe"]["median"], bars_per_year)
        for c in per_config.values()
        if math.isfinite(c["test_sharpe"]["median"])
    ]
    variance = (
        0.0 if n_configs == 1 else (float(np.var(sharpes, ddof=1)) if len(sharpes) > 1 else NAN)
    )
    sharpe = per_bar_sharpe(_median([r["test_sharpe"] for r in best]), bars_per_year)
    skew = _median([r["test_return_skew"] for r in best])
    kurtosis = _median([r["test_return_kurtosis"] for r in best])
    skew = 0.0 if math.isnan(skew) else skew  # no equity.csv: normal returns
    kurtosis = 3.0 if math.isnan(kurtosis) else kurtosis
    n_returns = int(bars) - 1
    return {
        "dsr": deflated_sharpe_ratio(sharpe, variance, n_configs, n_returns, skew, kurtosis),
        "sharpe_per_bar": sharpe,
        "configs": n_configs,
        "sharpe_variance_per_bar": variance,
        "returns": n_returns,
        "skew": skew,
        "kurtosis": kurtosis,
        "note": "median test Sharpe of the chosen config, deflated as if it were the best of "
        "the configs' median test Sharpes (conservative: it was chosen on validation)",
    }


def _pbo(rows: list[dict[str, Any]], returns: Mapping[str, np.ndarray | None]) -> float:
    """CSCV PBO over the configs' test returns (each config: the mean over its seeds per bar)."""
    columns = []
    for cid in sorted({r["config_id"] for r in rows}):
        found = [returns.get(r["trial_id"]) for r in rows if r["config_id"] == cid]
        series = [s for s in found if s is not None]
        if series and len({len(s) for s in series}) == 1:
            columns.append(np.mean(series, axis=0))
    if len(columns) < 2 or len({len(c) for c in columns}) != 1:
        return NAN
    try:
        return probability_of_backtest_overfitting(np.column_stack(columns), PBO_BLOCKS)
    except ValueError:  # too few bars for the blocks
        return NAN


def aggregate(
    rows: Sequence[Mapping[str, Any]],
    configs: Mapping[str, Mapping[str, Any]],
    seeds: Sequence[int],
    returns: Mapping[str, np.ndarray | None] | None = None,
) -> dict[str, Any]:
    """The summary.json mapping of the trial `rows` (dicts with trial_id, config_id, seed,
    status and the `FIGURES`) of the planned `configs` x `seeds`. Only 'done' trials enter the
    aggregates; the best config is the one with the highest median validation Sharpe over its
    done seeds (first of equals), and its test figures are reported beside, never used to choose.
    `returns` (trial id -> per-bar test returns) adds PBO over the configs when given."""
    counts = {s: sum(r["status"] == s for r in rows) for s in ("done", "failed", "stopped")}
    counts["not run"] = len(configs) * len(seeds) - sum(counts.values())
    per_config: dict[str, dict[str, Any]] = {}
    for cid, params in configs.items():
        done = [r for r in rows if r["config_id"] == cid and r["status"] == "done"]
        per_config[cid] = {
            "params": dict(params),
            "seeds_done": len(done),
            "validation_sharpe": spread([r["validation_sharpe"] for r in done]),
            "test_sharpe": spread([r["test_sharpe"] for r in done]),
            "test_return_pct": spread([r["test_return_pct"] for r in done]),
            "generalization_gap": spread([r["generalization_gap"] for r in done]),
            "buy_and_hold_test_sharpe": _median([r["buy_and_hold_test_sharpe"] for r in done]),
            "buy_and_hold_test_return_pct": _median(
                [r["buy_and_hold_test_return_pct"] for r in done]
            ),
        }
    ranked = [c for c in per_config if math.isfinite(per_config[c]["validation_sharpe"]["median"])]
    best_id = max(ranked, key=lambda c: per_config[c]["validation_sharpe"]["median"], default=None)
    summary: dict[str, Any] = {
        "configs_tried": len(configs),
        "seeds": list(seeds),
        "trials": {"planned": len(configs) * len(seeds), **counts},
        "chosen_on": "median validation Sharpe over seeds (test figures are not used to choose)",
        "best": None,
        "configs": per_config,
    }
    if best_id is not None:
        best_rows = [r for r in rows if r["config_id"] == best_id and r["status"] == "done"]
        chosen = per_config[best_id]
        summary["best"] = {
            "config": best_id,
            "params": chosen["params"],
            "validation_sharpe_median": chosen["validation_sharpe"]["median"],
            "test": {
                "sharpe": chosen["test_sharpe"],
                "return_pct": chosen["test_return_pct"],
                "buy_and_hold_sharpe": chosen["buy_and_hold_test_sharpe"],
                "buy_and_hold_return_pct": chosen["buy_and_hold_test_return_pct"],
            },
            "deflated_sharpe": _deflated_sharpe(best_rows, per_config, len(configs)),
        }
    if returns is not None:
        summary["pbo"] = _pbo([dict(r) for r in rows if r["status"] == "done"], returns)
    return summary


def plural(n: int, word: str) -> str:
    """'1 config', '3 configs'."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def _fmt(value: float, digits: int = 2, suffix: str = "") -> str:
    return f"{value:.{digits}f}{suffix}" if math.isfinite(value) else "n/a"


def selection_text(summary: Mapping[str, Any]) -> str:
    """The honest one-paragraph verdict: how much was tried, what was chosen on validation, and
    how it did on test (median and worst over seeds), with its deflated Sharpe ratio."""
    trials = summary["trials"]
    n_configs = summary["configs_tried"]
    tried = f"{plural(n_configs, 'config')} x {plural(len(summary['seeds']), 'seed')} tried"
    ended = ", ".join(f"{n} {s}" for s, n in trials.items() if s != "planned" and n)
    best = summary["best"]
    if best is None:
        return f"{tried} ({ended}); no config finished with a validation Sharpe: nothing chosen"
    params = ", ".join(f"{k}={v}" for k, v in best["params"].items()) or "the base config"
    test, dsr = best["test"], best["deflated_sharpe"]
    text = (
        f"{tried} ({ended}); best on validation: {best['config']} ({params}), median "
        f"validation Sharpe {_fmt(best['validation_sharpe_median'])}; its test: Sharpe median "
        f"{_fmt(test['sharpe']['median'])} worst {_fmt(test['sharpe']['worst'])}, return median "
        f"{_fmt(test['return_pct']['median'], 1, '%')} worst "
        f"{_fmt(test['return_pct']['worst'], 1, '%')} (buy-and-hold Sharpe "
        f"{_fmt(test['buy_and_hold_sharpe'])}, "
        f"return {_fmt(test['buy_and_hold_return_pct'], 1, '%')}); "
        f"DSR {_fmt(dsr['dsr'])} for {plural(n_configs, 'config')}"
    )
    if math.isfinite(summary.get("pbo", NAN)):
        text += f"; PBO {_fmt(summary['pbo'])}"
    return text


# --- the picture and the files ----------------------------------------------------------------


def render(summary: Mapping[str, Any]) -> Figure:
    """summary.png: per config, the test Sharpe and test return of each seed (points), their
    median (a bar) and buy-and-hold's (a cross); the config chosen on validation is starred."""
    configs = summary["configs"]
    ids = list(configs)
    best = (summary["best"] or {}).get("config")
    fig = Figure(figsize=(max(6.0, 0.6 * len(ids) + 3), 6.5), layout="constrained")
    axes = fig.subplots(2, 1, sharex=True)
    panels = [
        ("test_sharpe", "buy_and_hold_test_sharpe", "test Sharpe (annualised)"),
        ("test_return_pct", "buy_and_hold_test_return_pct", "test return (%)"),
    ]
    rng = np.random.default_rng(0)  # jitter only
    for ax, (key, hold_key, label) in zip(axes, panels, strict=True):
        for x, cid in enumerate(ids):
            values = configs[cid][key]["values"]
            jitter = rng.uniform(-0.12, 0.12, len(values))
            ax.scatter(x + jitter, values, s=18, color="tab:blue", alpha=0.7, zorder=3)
            median = configs[cid][key]["median"]
            if math.isfinite(median):
                ax.hlines(median, x - 0.3, x + 0.3, color="tab:blue", linewidth=2.5, zorder=4)
            hold = configs[cid][hold_key]
            if math.isfinite(hold):
                ax.scatter([x], [hold], marker="x", s=50, color="tab:orange", zorder=5)
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    seeds = len(summary["seeds"])
    labels = [f"{c}{'*' if c == best else ''}\n{configs[c]['seeds_done']}/{seeds}" for c in ids]
    axes[1].set_xticks(range(len(ids)), labels)
    axes[1].set_xlim(-0.6, len(ids) - 0.4)
    axes[1].set_xlabel(
        "config (* chosen on validation) and seeds done\n"
        "points: seeds, bar: their median, x: buy-and-hold"
    )
    fig.suptitle(
        f"{plural(summary['configs_tried'], 'config')} x "
        f"{plural(len(summary['seeds']), 'seed')}: test split"
    )
    return fig


def write_outputs(out: Path, rows: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> None:
    """Write OUT/summary.csv (the rows), OUT/summary.json and OUT/summary.png, atomically."""
    csv = pd.DataFrame(list(rows)).to_csv(index=False).encode()
    write_atomic(out / "summary.csv", lambda file: file.write(csv))
    write_json_atomic(out / "summary.json", summary)
    png = io.BytesIO()
    render(summary).savefig(png, format="png", dpi=110)
    write_atomic(out / "summary.png", lambda file: file.write(png.getvalue()))

"""How the learning benchmark (`benchmarks/learning.py`) scores what a run trained: its series,
the references it is measured against, and the figures each result carries.

A synthetic run's series and split (`synthetic_series`), its agent's figures on its own tail
(`tail_figures`) and on fresh series of its kind (`score_on_fresh_series`: realized and, on
the crash-free regime kinds, expected log growth against buy-and-hold, the oracle, the fair
ceiling, the estimated ceiling and sized hold), what it held in each regime (`held_by_state`),
what its heads do when only the volatility level changes (`volatility_probe`) and whether its
direction head reads the hidden trend apart from its lean (`direction_probe`), the contest it
held (`contest_fields`) and the restart it kept (`restart_kept`), and a real walk-forward's
figures (`real_figures`). `learning.py` trains and scores through these; `learning_reselect.py`
scores a run held again through them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from learning_report import finite

N_TRAIN, N_VALIDATION, N_TAIL = 3000, 1000, 3000  # bars of each synthetic series, in order


FRESH_SEED = 10_000  # fresh series k of a kind has seed FRESH_SEED + k, the same for every run


FRESH_SERIES = 8  # fresh series each agent is scored on by default (--quick: 2)


def tail_figures(agent: dict[str, Any], hold: float, ceiling: float) -> dict[str, Any]:
    """The agent's figures on its own tail from its backtest `agent` metrics, against
    buy-and-hold's and the fair ceiling's log growth there (`hold`, `ceiling`)."""
    growth = math.log1p(agent["total_return_pct"] / 100.0)
    edge = ceiling - hold
    return {
        "growth_agent": growth,
        "share": (growth - hold) / edge if edge > 0 else math.nan,
        "excess_growth": growth - hold,
        "sharpe": finite(agent["sharpe"]),
        "turnover_per_year": finite(agent["turnover_per_year"]),
        "fees_pct_per_year": finite(agent["fees_pct_per_year"]),
        "average_leverage": finite(agent["average_leverage"]),
    }


REFERENCES = ("oracle", "ceiling")


def reference_env(config: Any) -> Any:
    """The env config the references (oracle, ceilings, buy-and-hold, sized hold) trade under,
    for an agent trained under run config `config`: its env, and where
    `policy.deployed_leverage` is set, that level alone, the only one the agent's saved policy
    trades at. The ceiling is then tuned over what the agent can do, not over the levels its
    leverage head only explored in training."""
    level = config.policy.deployed_leverage
    return config.env if level is None else replace(config.env, leverage_levels=(level,))


def tail_references(series: Any, env_config: Any, split: Any) -> dict[str, float]:
    """Log growth over the tail (`split.test`) of `series` of each of `REFERENCES`, their
    knobs tuned on the training bars (`split.train`), never on the tail."""
    from envs.synthetic import rule_actions, run_actions, tune_knobs

    tail, growth = split.test, {}
    for rule in REFERENCES:
        knobs = tune_knobs(series, env_config, rule, split.train)
        actions = rule_actions(series, env_config, rule, knobs, start=tail.start)
        growth[rule] = run_actions(series, env_config, actions, tail).log_growth
    return growth


# Kinds whose parameters `envs.synthetic.estimation` fits: the estimated ceiling is scored there.
ESTIMATED_KINDS = (
    "random_walk",
    "trend_regimes",
    "volatility_regimes",
    "mean_reversion",
    "turbulence_regimes",
)


# Crash-free regime kinds: every rule is also scored by its expected log growth there.
EXPECTED_KINDS = ("random_walk", "trend_regimes", "volatility_regimes", "turbulence_regimes")


# The fitted parameters each family reports (`estimated_params`).
FITTED_KEYS = {"regime": ("drift", "vol", "transition"), "ou": ("phi", "deviation_sd", "noise_sd")}


# Calm / turbulent kinds: the volatility probe runs there.
VOLATILITY_KINDS = ("volatility_regimes", "turbulence_regimes")


def contest_fields(contest: dict[str, Any] | None) -> dict[str, Any]:
    """A run's contest (`challenger.json`'s content; None: the run held none) as result fields:
    `contender_kept` ("incumbent", "challenger" or "hold", "vote (incumbent)" where the run ships
    the vote of its incumbent, `train.vote`, as `learning_vote` names it; None without a
    contest) and the
    training bars' evidence it read (`training.run.evidence`), `evidence_momentum_p`,
    `evidence_tail_p`, `evidence_persistence_p`, the halves' reading, `evidence_halves_p`, and
    the momentum p-value a reversal level discounted, `evidence_momentum_reversal_p` (None where
    it read none)."""
    from training.run.challenger import recorded_evidence

    contest = contest or {}
    evidence = asdict(recorded_evidence(contest))
    return {
        "contender_kept": f"vote ({contest['kept']})"
        if contest.get("vote")
        else contest.get("kept"),
        **{f"evidence_{test}_p": p for test, p in evidence.items()},
    }


def restart_kept(run: Any) -> int:
    """With `train.restarts` > 1, which restart's model `run` (a `RunDir`) kept, or in a contest
    its incumbent did (1 is `train.seed`'s); 1 without restarts."""
    for choice in (run.restart_choice, run.contender("incumbent").restart_choice):
        if choice.is_file():
            return int(json.loads(choice.read_text())["kept"])
    return 1


def synthetic_series(kind: str, seed: int) -> tuple[Any, Any]:
    """The generated series of a run and its calendar split (train, validation, tail)."""
    from envs.splits import split_calendar
    from envs.synthetic import generate

    series = generate(kind, N_TRAIN + N_VALIDATION + N_TAIL, seed)
    n = len(series.market)
    return series, split_calendar([series.market], validation=N_VALIDATION / n, test=N_TAIL / n)


def training_bars_growth(market: Any, train: range) -> float:
    """Log growth of `market` over its training bars `train`, first close to last: which way the
    bars the agent learns from went. A range that fell far teaches any rule that reads the drift
    from it (the agent, the estimated ceiling) to stand aside; `run_table` shows it beside each
    run's scores so that a worst seed can be told from a data-limited one."""
    return math.log(market.close[train.stop - 1] / market.close[train.start])


def score_trained_agent(kind: str, seed: int, run_root: Path, n_fresh: int) -> dict[str, Any]:
    """What the run `run_root` ships (trained on series `seed` of `kind`: a policy, or a vote,
    `training.run.vote.load_trained`), loaded once and scored on fresh series
    (`score_on_fresh_series`) and, for a policy on the `VOLATILITY_KINDS` and
    `DIRECTION_KINDS`, probed (`volatility_probe`, `direction_probe`: they probe one policy, so
    a vote has none)."""
    from training.evaluation.vote import Vote
    from training.run.vote import load_trained

    loaded = load_trained(run_root)
    scores = score_on_fresh_series(kind, seed, loaded, n_fresh)
    if isinstance(loaded.trained, Vote):
        return scores
    return {**scores, **volatility_probe(kind, seed, loaded), **direction_probe(kind, seed, loaded)}


def score_on_fresh_series(kind: str, seed: int, loaded: Any, n_fresh: int) -> dict[str, Any]:
    """What a run ships (`loaded`, a `LoadedTrained`: a policy or a vote) trained on series
    `seed` of `kind`, scored on `n_fresh` new series of its kind, against buy-and-hold and the
    references there.

    One tail of 3,000 bars is a noisy yardstick: on crash risk, the ceiling's edge over
    buy-and-hold is 0.19 +- 0.19 of log growth per tail (benchmarks/RESULTS.md). The generator is
    known, so the agent (its best model, as the test backtest uses) is also scored on the tails of
    fresh series of its kind, seeds ``FRESH_SEED + k``, the same for every run and config: paired
    comparisons. Each fresh series is a whole series like the agent's own, and the references
    tune their knobs on its training bars, so their figures depend on the kind and the env
    config only (`fresh_references`). ``share_fresh`` pools over the fresh series:
    ``sum(g_agent - g_bh) / sum(g_ceiling - g_bh)``.

    Two more figures:

    - on the `ESTIMATED_KINDS`, the estimated ceiling of the agent's own series (its parameters
      fitted to, and its knobs tuned on, the training bars the agent had), scored on the same
      fresh series: ``share_estimated_fresh``, pooled the same way;
    - on the `EXPECTED_KINDS` (crash-free regime series), every rule's **expected** log growth
      given the exposures it held (`envs.synthetic.expectation`), which drops the price noise
      that realized growth carries: ``share_expected_fresh`` and
      ``excess_growth_expected_fresh`` for the agent, ``share_estimated_expected_fresh`` for the
      estimated ceiling;
    - with `env.volatility_target`, buy-and-hold's action sized as the agent's positions are
      (decided on every bar): ``share_sized_hold_fresh`` (and ``..._expected_fresh``), what the
      sizing alone earns without a policy.
    """
    if n_fresh == 0:
        return {}
    from training.evaluation.backtest import evaluation_env
    from training.evaluation.vote import record_trained

    env_config = loaded.config.env  # the run's, with the bars per year it trained under
    references = reference_env(loaded.config)  # what the references trade under
    regime = kind in EXPECTED_KINDS
    rules = ["agent", *(["estimated"] if kind in ESTIMATED_KINDS else [])]
    if env_config.volatility_target is not None:
        rules.append("sized_hold")
    growths: dict[str, list[float]] = {
        name: [] for name in [*rules, "buy_and_hold", *REFERENCES]
    }  # realized log growth on each fresh tail
    expected: dict[str, list[float]] = {name: [] for name in growths} if regime else {}
    for k in range(n_fresh):
        series, split = synthetic_series(kind, FRESH_SEED + k)
        tail = split.splits[0].test
        env = evaluation_env(series.market, env_config, tail)
        agent = record_trained(loaded.trained, env.core)[0]
        runs = {"agent": _record_growths(series, env.core.first_bar, agent, regime)}
        if "estimated" in rules:
            runs["estimated"] = _run_growths(
                series, estimated_run(kind, seed, series, tail, references), regime
            )
        if "sized_hold" in rules:
            runs["sized_hold"] = _run_growths(
                series, sized_hold_run(series, tail, references), regime
            )
        runs.update(fresh_references(kind, k, references))
        for name, (realized, mean) in runs.items():
            growths[name].append(realized)
            if regime:
                expected[name].append(mean)
    scores: dict[str, Any] = {}
    for measure, by_rule, prefix in (("", growths, "growth"), ("_expected", expected, "expected")):
        if not by_rule:
            continue
        hold, ceiling = by_rule["buy_and_hold"], by_rule["ceiling"]
        scored = (("agent", ""), ("estimated", "_estimated"), ("sized_hold", "_sized_hold"))
        for rule, name in scored:
            if rule in by_rule:
                gained, share = pooled_share(by_rule[rule], hold, ceiling)
                scores[f"share{name}{measure}_fresh"] = share
                scores[f"excess_growth{name}{measure}_fresh"] = gained / n_fresh
        scores.update({f"{prefix}_{rule}_fresh": values for rule, values in by_rule.items()})
    return scores


def _run_growths(series: Any, run: Any, expected: bool) -> tuple[float, float]:
    """(realized, expected or NaN) log growth of a `RunResult` on `series`; `expected` only on a
    crash-free regime series."""
    from envs.synthetic import expected_log_growth

    if not expected:
        return run.log_growth, math.nan
    return run.log_growth, expected_log_growth(series, run.first_bar, run.exposure, run.cost_share)


def _record_growths(
    series: Any, first_bar: int, record: Any, expected: bool
) -> tuple[float, float]:
    """(realized, expected or NaN) log growth of a backtest `record` (row 0 at `first_bar`'s
    close) on `series`."""
    from envs.synthetic import expected_log_growth

    equity = record["equity"].to_numpy()  # [n + 1]
    realized = math.log(equity[-1] / equity[0]) if equity[-1] > 0 else -math.inf
    if not expected:
        return realized, math.nan
    cost_share = record["costs"].to_numpy()[1:] / equity[:-1]  # [n]
    exposure = record["exposure"].to_numpy()  # [n + 1]
    return realized, expected_log_growth(series, first_bar, exposure, cost_share)


def estimated_on_own_tail(
    kind: str, seed: int, series: Any, tail: range, env_config: Any, hold: float, edge: float
) -> dict[str, Any]:
    """The estimated ceiling of `series` (series `seed` of `kind`, as `synthetic_series` gives
    it) on its own `tail`, where buy-and-hold grew `hold` and the fair ceiling `hold + edge`;
    {} outside `ESTIMATED_KINDS`."""
    if kind not in ESTIMATED_KINDS:
        return {}
    g_estimated = estimated_run(kind, seed, series, tail, env_config).log_growth
    fitted = estimated_rule(kind, seed, env_config)[0]
    return {
        "growth_estimated": g_estimated,
        "share_estimated": (g_estimated - hold) / edge if edge > 0 else math.nan,
        "excess_growth_estimated": g_estimated - hold,
        "estimated_params": {k: fitted.params[k] for k in FITTED_KEYS[fitted.family]},
    }


def pooled_share(
    growths: Sequence[float], hold: Sequence[float], ceiling: Sequence[float]
) -> tuple[float, float]:
    """(gained, share) of a rule over fresh series, from its, buy-and-hold's and the fair
    ceiling's log growth on each: ``gained = sum(g - g_bh)`` and ``share = gained /
    sum(g_ceiling - g_bh)`` (NaN where the ceiling gained nothing). Pooled, so that a series
    whose ceiling barely beats buy-and-hold cannot blow the share up."""
    gained = sum(g - b for g, b in zip(growths, hold, strict=True))
    edge = sum(c - b for c, b in zip(ceiling, hold, strict=True))
    return gained, gained / edge if edge > 0 else math.nan


def estimated_fresh_shares(kind: str, seed: int, env_config: Any, n_fresh: int) -> dict[str, float]:
    """The estimated ceiling of series `seed` of `kind` (an `ESTIMATED_KINDS` kind) scored on the
    tails of the `n_fresh` fresh series alone, no agent: ``share_estimated_fresh`` and, on the
    `EXPECTED_KINDS`, ``share_estimated_expected_fresh``, pooled as `score_on_fresh_series`
    pools them (the same figures it records beside an agent's)."""

    def run_on(series: Any, tail: range) -> Any:
        return estimated_run(kind, seed, series, tail, env_config)

    return rule_fresh_shares(kind, "estimated", run_on, env_config, n_fresh)


def sized_hold_run(series: Any, tail: range, env_config: Any) -> Any:
    """The `RunResult` over `tail` of `series` of buy-and-hold's action sized by `env_config`'s
    volatility budget on every bar: what holding, a contest's third contender, trades."""
    from envs.synthetic import buy_and_hold_actions, run_actions

    hold = buy_and_hold_actions(env_config, len(series.market))
    return run_actions(series, env_config, hold, tail, sized=True)


def rule_fresh_shares(
    kind: str, name: str, run_on: Any, env_config: Any, n_fresh: int
) -> dict[str, float]:
    """A rule's pooled shares of the fair ceiling's edge on the tails of the `n_fresh` fresh
    series of `kind` (`run_on(series, tail)` its `RunResult` there): ``share_<name>_fresh`` and,
    on the `EXPECTED_KINDS`, ``share_<name>_expected_fresh``, as `score_on_fresh_series` pools
    an agent's."""
    regime = kind in EXPECTED_KINDS
    growths, hold, ceiling = [], [], []  # (realized, expected) log growth on each fresh tail
    for k in range(n_fresh):
        series, split = synthetic_series(kind, FRESH_SEED + k)
        growths.append(_run_growths(series, run_on(series, split.splits[0].test), regime))
        references = fresh_references(kind, k, env_config)
        hold.append(references["buy_and_hold"])
        ceiling.append(references["ceiling"])
    measures = (("", 0), ("_expected", 1)) if regime else (("", 0),)
    figures = {}
    for measure, i in measures:
        pooled = ([g[i] for g in growths], [g[i] for g in hold], [g[i] for g in ceiling])
        figures[f"share_{name}{measure}_fresh"] = pooled_share(*pooled)[1]
    return figures


def estimated_run(kind: str, seed: int, series: Any, tail: range, env_config: Any) -> Any:
    """The `RunResult` over `tail` of `series` of the estimated ceiling of series `seed` of
    `kind` (`estimated_rule`): the fair ceiling's rule under the fitted parameters and their
    knobs."""
    from envs.synthetic import rule_actions, run_actions

    fitted, knobs = estimated_rule(kind, seed, env_config)
    believed = replace(series, params=fitted.params)  # the bars of `series`, the fitted model
    actions = rule_actions(believed, env_config, "ceiling", knobs, start=tail.start)
    return run_actions(series, env_config, actions, tail)


_ESTIMATED: dict[tuple[str, int, str], tuple[Any, Any]] = {}  # one process's cache


def estimated_rule(kind: str, seed: int, env_config: Any) -> tuple[Any, Any]:
    """(series, knobs) of the estimated ceiling of series `seed` of `kind`: the series with the
    parameters `envs.synthetic.estimation` fits to its training bars (the bars an agent trained
    on it had), and the knobs tuned on those bars under them. Cached per process."""
    from envs.synthetic import estimated_series, tune_knobs

    key = (kind, seed, repr(env_config))
    if key not in _ESTIMATED:
        series, split = synthetic_series(kind, seed)
        train = split.splits[0].train
        fitted = estimated_series(series, train)
        _ESTIMATED[key] = (fitted, tune_knobs(fitted, env_config, "ceiling", train))
    return _ESTIMATED[key]


_FRESH_REFERENCES: dict[tuple[str, int, str], dict[str, tuple[float, float]]] = {}  # per process


def fresh_references(kind: str, k: int, env_config: Any) -> dict[str, tuple[float, float]]:
    """(realized, expected) log growth on the tail of fresh series k of `kind`: buy-and-hold,
    oracle and ceiling (knobs tuned on the series' own training bars); expected growth only on
    the `EXPECTED_KINDS` (else NaN). Cached per process."""
    from envs.synthetic import buy_and_hold_actions, rule_actions, run_actions, tune_knobs

    key = (kind, k, repr(env_config))
    if key not in _FRESH_REFERENCES:
        series, split = synthetic_series(kind, FRESH_SEED + k)
        train, tail = split.splits[0].train, split.splits[0].test
        actions = {"buy_and_hold": buy_and_hold_actions(env_config, len(series.market))}
        for rule in REFERENCES:
            knobs = tune_knobs(series, env_config, rule, train)
            actions[rule] = rule_actions(series, env_config, rule, knobs, start=tail.start)
        found = {}
        for name, chosen in actions.items():
            run = run_actions(series, env_config, chosen, tail)
            found[name] = _run_growths(series, run, kind in EXPECTED_KINDS)
        _FRESH_REFERENCES[key] = found
    return _FRESH_REFERENCES[key]


def held_by_state(equity_csv: Path, state: Any, tail: range) -> dict[str, float]:
    """The agent's mean |exposure| and chosen leverage on the tail's bars of each regime.

    Row k >= 1 of the record is bar ``tail.start + k``: the action held during it (chosen on
    the bar before) and the exposure at its close, under the regime ``state[tail.start + k]``.
    For the regime series only (an integer state): on volatility regimes this shows whether the
    leverage head sizes to the volatility it sees.
    """
    import numpy as np
    import pandas as pd

    if not np.issubdtype(np.asarray(state).dtype, np.integer):
        return {}
    record = pd.read_csv(equity_csv).iloc[1:]
    regime = np.asarray(state)[tail.start + 1 : tail.start + 1 + len(record)]  # [n]
    exposure = record["exposure"].abs().to_numpy()  # [n]
    chosen = record["leverage"].to_numpy()  # [n]
    in_position = (record["direction"] != "flat").to_numpy()  # [n]
    found = {}
    for k in np.unique(regime):
        mask = regime == k
        held = mask & in_position
        found[f"exposure_state{k}"] = float(exposure[mask].mean())
        found[f"leverage_state{k}"] = float(chosen[held].mean()) if held.any() else math.nan
    return found


def _tail_env(kind: str, seed: int, loaded: Any) -> tuple[Any, Any]:
    """The probes' series and env: series `seed` of `kind`, and an evaluation env over its tail
    under the agent `loaded`'s env config. The probes read the tail's decision bars from a flat
    account with its initial equity (`training.evaluation.lean`, which validation's direction
    lean reads too)."""
    from training.evaluation.backtest import evaluation_env

    series, split = synthetic_series(kind, seed)
    return series, evaluation_env(series.market, loaded.config.env, split.splits[0].test)


def volatility_probe(kind: str, seed: int, loaded: Any) -> dict[str, float]:
    """What the agent `loaded` (a `LoadedTrained` of one policy) decides when only the
    volatility level changes.

    On the `VOLATILITY_KINDS` only (else {}): at every decision bar of the tail of series
    `seed`, the observation the agent would see from a flat account (`_tail_env`),
    with the `volatility` column of the whole window set to the level of each regime (the
    generator's per-bar vol, annualised as the env does) and `volatility_trend` to 0; everything
    else, the scaled price moves included, is the bar's own. Per regime k, averaged over the
    bars: the leverage head's expected level (``probe_leverage_state<k>``) and the direction
    head's probability of flat (``probe_flat_state<k>``). Growth-optimal leverage is about 6x
    calm and 0.9x turbulent on volatility regimes, 6x and 0.32x on turbulence regimes, so a head
    that reads the level chooses less in state 1.
    """
    if kind not in VOLATILITY_KINDS:
        return {}
    import torch

    from training.evaluation.lean import flat_account_observations

    config = loaded.config.env
    series, env = _tail_env(kind, seed, loaded)
    _, obs = flat_account_observations(env)
    core = env.core
    names = config.feature_names
    level, trend = names.index("volatility"), names.index("volatility_trend")
    per_year = math.sqrt(core.bars_per_year)
    levels = torch.tensor(config.leverage_levels, dtype=torch.float32)  # [L]
    found = {}
    for k, vol in enumerate(series.params["vol"]):
        probe = obs["market"].copy()  # [N, W, F]
        probe[:, :, level] = math.log(vol * per_year)
        probe[:, :, trend] = 0.0
        with torch.no_grad():
            heads = loaded.trained.head_distributions({**obs, "market": probe}).heads()
        leverage = heads["leverage"].probs @ levels  # [N]
        flat = heads["direction"].probs[:, config.flat_direction_index]  # [N]
        found[f"probe_leverage_state{k}"] = float(leverage.mean())
        found[f"probe_flat_state{k}"] = float(flat.mean())
    return found


DIRECTION_KINDS = ("trend_regimes",)  # kinds whose hidden state is which way the market goes


def direction_probe(kind: str, seed: int, loaded: Any) -> dict[str, float]:
    """Whether the agent `loaded`'s direction head reads the hidden trend, apart from how far it
    leans to one side.

    On the `DIRECTION_KINDS` only (else {}): at every decision bar of the tail of series `seed`,
    from a flat account (`training.evaluation.lean.long_probabilities`, so the account's own
    hysteresis plays no part), the direction head's probability of long. ``probe_long_share``
    is the share of bars on which it exceeds 1/2 (the deterministic choice from flat);
    ``probe_long_auc`` is how well it ranks the bars whose next bar is in the up state above
    those in the down state (`rank_auc`: 0.5 reads nothing, 1 ranks every up bar first).
    A head that collapsed to always long after training bars that rose can still rank the
    spells (benchmarks/RESULTS.md, fifty-third round: AUC 0.66-0.77 under a long share near 1);
    one that reads nothing stays near 0.5 whatever its share.
    """
    if kind not in DIRECTION_KINDS:
        return {}
    from training.evaluation.lean import decision_bars, long_probabilities

    series, env = _tail_env(kind, seed, loaded)
    long = long_probabilities(loaded.trained, env)  # [N]
    up = series.state[decision_bars(env) + 1] == series.params["state_names"].index("up")  # [N]
    return {"probe_long_share": float((long > 0.5).mean()), "probe_long_auc": rank_auc(long, up)}


def rank_auc(scores: Any, positive: Any) -> float:
    """The probability that a positive's score exceeds a negative's, ties counting half: the
    area under the ROC curve, or the Mann-Whitney U over the pairs. NaN without both a positive
    and a negative. scores, positive: [N] floats and bools."""
    import numpy as np

    scores, positive = np.asarray(scores, dtype=np.float64), np.asarray(positive, dtype=bool)
    pos, neg = scores[positive], np.sort(scores[~positive])  # [P], [Q]
    if len(pos) == 0 or len(neg) == 0:
        return math.nan
    below = np.searchsorted(neg, pos, side="left")  # [P] negatives under each positive
    tied = np.searchsorted(neg, pos, side="right") - below  # [P] negatives equal to it
    return float((below + 0.5 * tied).sum() / (len(pos) * len(neg)))


def real_figures(seed: int, run: Path, report: dict[str, Any], seconds: float) -> dict[str, Any]:
    """The figures of one seed's walk-forward (`run`, its walkforward.json data `report`) that
    the benchmark reports: the combined accounts against the baselines, each instrument's and
    each fold's Sharpe."""
    agent, hold = report["aggregate"]["agent"], report["aggregate"]["buy_and_hold"]
    sized = report["aggregate"].get("sized_hold", {})  # only with `env.volatility_target`
    return {
        "seed": seed,
        "run": str(run),
        "seconds": seconds,
        "sharpe": finite(agent["sharpe"]),
        "sharpe_buy_and_hold": finite(hold["sharpe"]),
        "sharpe_minus_buy_and_hold": finite(agent["sharpe"]) - finite(hold["sharpe"]),
        # buy-and-hold sized like the agent, with `env.volatility_target` only (NaN without)
        "sharpe_sized_hold": finite(sized.get("sharpe")),
        "total_return_pct": agent["total_return_pct"],
        "total_return_pct_buy_and_hold": hold["total_return_pct"],
        "total_return_pct_sized_hold": finite(sized.get("total_return_pct")),
        "max_drawdown_pct": finite(agent["max_drawdown_pct"]),
        "max_drawdown_pct_buy_and_hold": finite(hold["max_drawdown_pct"]),
        "max_drawdown_pct_sized_hold": finite(sized.get("max_drawdown_pct")),
        "turnover_per_year": finite(agent["turnover_per_year"]),
        "fees_pct_per_year": finite(agent["fees_pct_per_year"]),
        "average_leverage": finite(agent["average_leverage"]),
        "noise_probability": finite(report["edge"]["noise_probability"]),
        "edge_sharpe": finite(report["edge"]["edge_sharpe"]),
        "instruments": {
            name: {
                "sharpe": finite(m["agent"]["sharpe"]),
                "buy_and_hold": finite(m["buy_and_hold"]["sharpe"]),
            }
            for name, m in report["instruments"].items()
        },
        # Each fold's test segment on its own: how much of it the agent was in the market, its
        # Sharpe against sized hold's, and the contender the fold kept (a policy that stands
        # aside through a segment shows here, not in the combined figures).
        "folds": [
            {
                "fold": fold["fold"],
                "test": fold["test"],
                "exposure_pct": finite(fold["metrics"].get("agent", {}).get("exposure_pct")),
                "sharpe": finite(fold["metrics"].get("agent", {}).get("sharpe")),
                "sharpe_sized_hold": finite(fold["metrics"].get("sized_hold", {}).get("sharpe")),
                "contender_kept": fold.get("contender_kept"),
            }
            for fold in report["folds"]
        ],
    }

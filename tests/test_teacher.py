"""The linear teacher: what the training bars establish about the direction, and its loss."""

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from stable_baselines3.common.logger import Logger

from envs import BatchedTradingEnv
from envs.features import feature_names
from training.config import load_config
from training.run.folder import RunDir
from training.run.session import build_model, fit
from training.run.teacher import (
    TEACHER_LEVEL,
    DirectionTeacher,
    LinearTeacher,
    _wald_p_value,
    bartlett_weights,
    describe_teacher,
    momentum_columns,
    overlap_weights,
)

REPO = Path(__file__).resolve().parents[1]
GOOGL = REPO / "data" / "gymanytrading_GOOGL_daily.csv"
SIDES = (0, 1)  # flat, long


def fake_core(signal: float, drift: float, n: int = 4000, seed: int = 0) -> SimpleNamespace:
    """What `LinearTeacher.fit` reads of a core: one range whose next-bar log move from the
    fill after bar t is ``signal * f_t[0] + drift`` plus noise, f_t two standard normal features
    (the second predicts nothing)."""
    rng = np.random.default_rng(seed)
    features = rng.standard_normal((n, 2)).astype(np.float32)  # [T, 2]
    moves = np.zeros(n)  # moves[t + 1] = log(open[t + 2] / open[t + 1]), decided at bar t
    moves[2:] = signal * features[:-2, 0] + drift + 0.01 * rng.standard_normal(n - 2)
    opens = 100.0 * np.exp(np.cumsum(moves))
    return SimpleNamespace(
        first_bars=np.array([0]),
        end_bars=np.array([n - 1]),
        ohlc=np.stack([opens, opens, opens, opens], axis=1),
        features=features,
        scale=np.ones(n),
    )


def test_the_teacher_labels_long_where_the_feature_predicts_a_rise_and_flat_where_a_fall():
    teacher = LinearTeacher.fit(fake_core(signal=0.005, drift=0.0), ranges=1, horizon=1)
    assert teacher is not None and teacher.p_value < 1e-6 and teacher.teaches
    assert abs(teacher.coef[1] - 0.005) < 0.001 and abs(teacher.coef[2]) < 0.001
    assert "it teaches" in describe_teacher(teacher)
    market = np.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.0]])  # [3, F]
    assert teacher.labels(market, SIDES).tolist() == [1, 0, -1]
    assert teacher.labels(market, (-1, 0, 1)).tolist() == [2, 0, -1]  # short where it falls


def momentum_noise_core(n: int, seed: int) -> SimpleNamespace:
    """What `LinearTeacher.fit` reads of a core whose opens are a random walk and whose two
    features are its momentum over the 16 and 64 moves up to each bar: persistent regressors
    that predict nothing."""
    rng = np.random.default_rng(seed)
    moves = 0.01 * rng.standard_normal(n + 64)  # moves[64 + t]: the move into open t
    features = np.stack(
        [
            np.convolve(moves, np.ones(w), "valid")[65 - w : 65 - w + n] / (0.01 * w**0.5)
            for w in (16, 64)
        ],
        axis=1,
    )  # [n, 2] feature t sums the w moves up to open t
    opens = 100.0 * np.exp(np.cumsum(moves[64:]))
    return SimpleNamespace(
        first_bars=np.array([0]),
        end_bars=np.array([n - 1]),
        ohlc=np.stack([opens, opens, opens, opens], axis=1),
        features=features.astype(np.float32),
        scale=np.ones(n),
    )


@pytest.mark.parametrize(("signal", "reverses"), [(0.005, False), (-0.005, True)])
def test_a_fit_reverses_where_its_market_coefficients_sum_below_zero(signal, reverses):
    teacher = LinearTeacher.fit(fake_core(signal=signal, drift=0.001), ranges=1, horizon=1)
    assert teacher is not None and teacher.p_value < 1e-6
    assert teacher.reverses is reverses  # the constant's sign, the drift, does not count


def test_the_covariance_weights_count_the_overlap_of_the_decisions_returns():
    """Returns over h bars that start j < h bars apart share h - j bars: the long-run variance
    of their sum is h times one's, ``1 + 2 sum_j w_j (h - j) / h`` in units of one's variance.
    Hansen and Hodrick's weights count all of it; Bartlett's about three quarters at h = 5."""
    assert bartlett_weights(5) == pytest.approx([5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6])
    assert overlap_weights(5).tolist() == [1.0] * 4
    assert len(overlap_weights(1)) == 0  # one-bar returns do not overlap: White's covariance

    def counted(weights: np.ndarray, h: int) -> float:
        shared = (h - np.arange(1, len(weights) + 1)) / h  # [lags] correlation at each lag
        return float(1.0 + 2.0 * np.sum(weights[: h - 1] * shared[: h - 1]))

    assert counted(overlap_weights(5), 5) == pytest.approx(5.0)
    assert counted(bartlett_weights(5), 5) == pytest.approx(5.0 * 11 / 15)


def test_a_direction_of_negative_variance_is_left_out_of_the_joint_test():
    """Hansen and Hodrick's weights can give a covariance a negative eigenvalue; the test then
    reads only the directions of positive variance, and nothing where there are none."""
    one = _wald_p_value(np.array([3.0]), np.array([[1.0]]))
    assert 0.001 < one < 0.01  # a chi-square of 9 with one degree of freedom: 0.0027
    assert _wald_p_value(np.array([3.0, 5.0]), np.diag([1.0, -1.0])) == one
    assert _wald_p_value(np.array([3.0]), np.array([[-1.0]])) == 1.0


def test_with_the_overlap_weights_the_joint_test_holds_its_size_on_noise():
    """Momentum features of a random walk predict nothing; tested on decisions held 5 bars, the
    joint test with Bartlett's weights passes at 0.1 on about twice as many ranges as its level,
    with Hansen and Hodrick's on about its level."""
    cores = [momentum_noise_core(3000, seed) for seed in range(300)]

    def passing(lag_weights) -> float:
        fits = [LinearTeacher.fit(core, 1, 5, lag_weights=lag_weights) for core in cores]
        return float(np.mean([fit is not None and fit.p_value < 0.1 for fit in fits]))

    assert 0.06 <= passing(overlap_weights) <= 0.14
    assert passing(bartlett_weights) >= 0.14


def test_a_drift_enters_the_lesson_only_where_the_bars_establish_it():
    """A range that rose by chance teaches long only where the features say so; a drift beyond
    `z` standard errors is part of every state's prediction."""
    chance = LinearTeacher.fit(fake_core(signal=0.005, drift=0.0002), ranges=1, horizon=1)
    assert chance is not None and chance.teaches and not chance.teaches_drift
    market = np.array([[0.05, 0.0], [-0.05, 0.0], [0.0, 0.0]])  # [3, F]
    assert chance.labels(market, SIDES).tolist() == [1, 0, -1]
    established = LinearTeacher.fit(fake_core(signal=0.005, drift=0.004), ranges=1, horizon=1)
    assert established is not None and established.teaches and established.teaches_drift
    assert established.labels(np.array([[-0.5, 0.0], [-1.0, 0.0]]), SIDES).tolist() == [1, 0]
    assert "with the training bars' drift" in describe_teacher(established)


def test_on_noise_the_joint_test_rarely_passes_and_a_failed_teacher_teaches_nothing():
    teachers = [
        LinearTeacher.fit(fake_core(0.0, 0.0, seed=seed), 1, horizon=5) for seed in range(20)
    ]
    assert all(teacher is not None for teacher in teachers)
    p_values = np.array([teacher.p_value for teacher in teachers if teacher is not None])
    assert (p_values < TEACHER_LEVEL).sum() <= 1 and np.median(p_values) > 0.2
    market = np.random.default_rng(99).standard_normal((2000, 2))
    for teacher in teachers:
        if teacher is not None and not teacher.teaches:
            assert (teacher.labels(market, SIDES) == -1).all()


def test_the_target_is_the_sized_longs_log_growth_not_its_share_of_the_markets():
    """A position sized to half the account and held in units grows by log(1 + 0.5 r), not by
    half the market's log move: on a path that returns to its start, the latter is zero while
    the account, rebalanced at every decision, gains (the constant of a fit without features is
    the mean target)."""
    n = 400
    moves = np.where(np.arange(n) % 2 == 0, 0.1, -0.1)  # log moves, up and down in turn
    opens = 100.0 * np.exp(np.cumsum(moves))  # [T]
    core = SimpleNamespace(
        first_bars=np.array([0]),
        end_bars=np.array([n - 1]),
        ohlc=np.stack([opens] * 4, axis=1),
        features=np.zeros((n, 1), dtype=np.float32),
        scale=np.full(n, 0.5),
    )
    teacher = LinearTeacher.fit(core, ranges=1, horizon=1)
    assert teacher is not None
    bars = np.arange(0, n - 2)
    sized = np.log1p(0.5 * (opens[bars + 2] / opens[bars + 1] - 1.0))
    assert abs(teacher.coef[0] - sized.mean()) < 1e-12 and sized.mean() > 0.001


def test_a_drift_alone_teaches_nothing_and_short_ranges_fit_no_teacher():
    """Holding is PPO's to learn: the teacher speaks only where the features tell states apart."""
    teacher = LinearTeacher.fit(fake_core(0.0, 0.002), ranges=1, horizon=1)
    assert teacher is not None and teacher.coef[0] > 0.0015 and not teacher.teaches
    assert (teacher.labels(np.zeros((5, 2)), SIDES) == -1).all()
    assert "teaches nothing" in describe_teacher(teacher)
    assert LinearTeacher.fit(fake_core(0.0, 0.002, n=25), ranges=1, horizon=1) is None
    assert "too few training bars" in describe_teacher(None)


def test_the_loss_moves_the_taught_states_towards_their_levels(tmp_path):
    sets = ["env.window=8", "env.long_only=true", "policy.device=cpu"]
    cfg = load_config(None, [*sets, "ppo.n_envs=8", "ppo.n_steps=8", "ppo.batch_size=16"])
    env = BatchedTradingEnv(GOOGL, cfg.env, n_envs=8)
    env.seed(0)
    model = build_model(cfg, env, RunDir(tmp_path / "run"))
    model.set_logger(Logger(folder=None, output_formats=[]))
    obs = env.reset()
    n_features = obs["market"].shape[-1]
    obs["market"][:, -1, 0] -= np.median(obs["market"][:, -1, 0])  # half the states above 0
    market = obs["market"][:, -1, :]
    # Long where the first feature is positive, flat where negative; no error: every state taught.
    teacher = LinearTeacher(
        coef=np.concatenate([[0.0, 1.0], np.zeros(n_features - 1)]),
        covariance=np.zeros((1 + n_features, 1 + n_features)),
    )
    lesson = DirectionTeacher(1.0, batch_size=16, seed=0, teacher=teacher, sides=SIDES)
    lesson.init_callback(model)
    labels = teacher.labels(market, SIDES)

    def probs() -> np.ndarray:
        with torch.no_grad():
            return model.policy.head_distributions(obs).heads()["direction"].probs.numpy()

    start = probs()
    for _ in range(20):
        lesson._pending = obs
        lesson._on_rollout_start()
    end = probs()
    taught = np.arange(len(labels))
    moved = end[taught, labels] - start[taught, labels]
    assert (labels >= 0).all() and len(set(labels.tolist())) == 2 and (moved > 0.05).all()
    assert lesson._pending is None


def test_training_with_the_teacher_fits_it_on_the_real_ranges_and_teaches_each_rollout(
    tmp_path, monkeypatch
):
    from envs import load_market_data
    from training.run import teacher as teacher_module

    fitted, taught = [], []
    real_fit, real_targets = LinearTeacher.fit.__func__, DirectionTeacher._targets

    def spy_fit(
        cls,
        core,
        ranges,
        horizon,
        z=teacher_module.TEACHER_Z,
        columns=None,
        lag_weights=teacher_module.bartlett_weights,
    ):
        fitted.append((len(core.first_bars), ranges, horizon, columns, lag_weights))
        teacher = real_fit(cls, core, ranges, horizon, z, columns, lag_weights)
        return dataclasses.replace(teacher, p_value=p_value)

    def spy_targets(self, flat):
        result = real_targets(self, flat)
        taught.append(len(flat["market"]))
        return result

    monkeypatch.setattr(LinearTeacher, "fit", classmethod(spy_fit))
    monkeypatch.setattr(DirectionTeacher, "_targets", spy_targets)
    sets = ["env.window=8", "env.decision_interval=5", "policy.device=cpu", "ppo.n_envs=4"]
    sets += ["ppo.n_steps=16", "ppo.batch_size=32", "train.total_timesteps=128"]
    sets += ["train.direction_teacher=1", "train.resampled_paths=2", "train.progress_bar=false"]
    sets += ["env.momentum_horizons=[16,64]"]
    cfg = load_config(None, sets)
    market = load_market_data(GOOGL)
    p_value = 0.0  # as if the bars' features predicted the next decision's return
    model = fit(cfg, [(market, range(0, 800))], RunDir(tmp_path / "taught"))
    assert model.num_timesteps >= 128
    # The real range, not its two copies; decisions held 5 bars; the momentum features only;
    # Bartlett's weights, for which the teacher's level was measured
    momentum = [len(feature_names()) + i for i in range(len(cfg.env.momentum_horizons))]
    assert momentum and fitted == [(3, 1, 5, momentum, bartlett_weights)]
    assert taught == [64, 64]  # each rollout of 4 accounts x 16 steps, the last one included
    p_value = 0.5  # a teacher that fails its test is not trained with at all
    fit(cfg, [(market, range(0, 800))], RunDir(tmp_path / "untaught"))
    assert len(fitted) == 2 and taught == [64, 64]


def test_the_teacher_reads_only_its_columns_and_momentum_columns_name_them():
    core = fake_core(signal=0.005, drift=0.0)
    on_second = LinearTeacher.fit(core, ranges=1, horizon=1, columns=[1])
    assert on_second is not None and on_second.columns == (1,) and not on_second.teaches
    market = np.array([[2.0, 0.0], [-2.0, 0.0]])
    assert (on_second.labels(market, SIDES) == -1).all()  # the predictive first feature unread
    on_first = LinearTeacher.fit(core, ranges=1, horizon=1, columns=[0])
    assert on_first is not None and on_first.teaches
    assert on_first.labels(market, SIDES).tolist() == [1, 0]
    assert LinearTeacher.fit(core, ranges=1, horizon=1, columns=[]) is None
    names = feature_names((16, 64))
    assert [names[i] for i in momentum_columns(names)] == ["momentum_16", "momentum_64"]

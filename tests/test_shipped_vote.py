"""`train.vote`: where the contest keeps the incumbent, the run ships the vote of its restarts and
the challenger (`training.run.vote`); what trades a run (the test backtest, `training.backtest`,
the walk-forward) trades that vote, and what reads one policy refuses it by name."""

import contextlib
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from envs import EnvConfig, load_market_data
from training.backtest import main as backtest_main
from training.config import ConfigError, resolve_config
from training.evaluation.backtest import backtest, evaluation_env
from training.evaluation.vote import Vote, record_trained
from training.evaluation.walkforward import trade_through
from training.export import main as export_main
from training.run.challenger import keep_better_contender
from training.run.contest_report import format_contest
from training.run.data import RunData
from training.run.folder import ModelError, RunDir, load_model
from training.run.vote import RULE, load_trained, member_models
from training.train import MIN_EVALUATION_STEPS, evaluation_envs
from training.train import main as train_main

REPO = Path(__file__).resolve().parents[1]
GOOGL = REPO / "data" / "gymanytrading_GOOGL_daily.csv"
VOTED = [
    "--config", "configs/smoke.yaml",
    "--set", 'train.challenger=["ppo.learning_rate=3e-3", "train.direction_outcomes=1"]',
    "--set", "train.restarts=2",
    "--set", "train.vote=true",
    "--set", "train.challenger_margin=1e9",  # the incumbent is kept: the vote ships
]  # fmt: skip
MEMBERS = [
    "incumbent/restart_1/best_model.safetensors",
    "incumbent/restart_2/best_model.safetensors",
    "challenger/best_model.safetensors",
]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def voted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A tiny run under `train.vote` whose contest keeps the incumbent, and its training log."""
    run = tmp_path_factory.mktemp("vote") / "run"
    capture = tmp_path_factory.mktemp("vote_log") / "out.txt"
    with capture.open("w") as log, contextlib.redirect_stdout(log):
        assert train_main([*VOTED, "--run-dir", str(run)]) == 0
    return run, capture.read_text()


def test_a_run_ships_the_vote_of_its_restarts_and_challenger_where_the_incumbent_is_kept(voted):
    run, log = voted
    shipped = json.loads((run / "vote.json").read_text())
    assert shipped == {"members": MEMBERS, "rule": RULE}
    contest = json.loads((run / "challenger.json").read_text())
    assert contest["kept"] == "incumbent" and contest["vote"] == MEMBERS
    assert "the contest kept the incumbent: a vote of 3 policies" in log
    assert "the incumbent competed as its restart 1" in log
    # The run's own model is restart 1's, the one policy a vote's incumbent competed as
    assert (run / "best_model.safetensors").read_bytes() == (run / MEMBERS[0]).read_bytes()
    assert str(run / "vote.json") in log
    loaded = load_trained(run)
    assert isinstance(loaded.trained, Vote) and len(loaded.trained.policies) == 3
    assert loaded.path == run / "vote.json" and loaded.run_dir == run
    # The test report is the vote's backtest, not the incumbent's alone
    data = RunData.load(loaded.config)
    ranges = data.ranges("test", MIN_EVALUATION_STEPS, loaded.config.env.window)
    (env,) = evaluation_envs(ranges, loaded.config).values()
    report = json.loads((run / "report" / "metrics.json").read_text())
    members = tuple(load_model(run / member).policy for member in MEMBERS)
    assert backtest(Vote(members), env).metrics["agent"] == report["agent"]


def test_what_reads_one_policy_refuses_a_vote_by_name_and_takes_a_member(voted, capsys):
    run, _ = voted
    with pytest.raises(ModelError, match=r"ships a vote of 3 policies \(vote\.json\)"):
        load_model(run)
    assert load_model(run / MEMBERS[1]).policy is not None  # a member is one policy
    assert export_main(["--model", str(run), "--out", str(run.parent / "m.onnx")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ships a vote of 3 policies" in err
    assert "restart_1" in err and not (run.parent / "m.onnx").exists()


def test_the_backtest_command_trades_the_vote_and_its_next_order_says_so(voted, tmp_path, capsys):
    run, _ = voted
    out = tmp_path / "bt"
    assert backtest_main(["--model", str(run), "--data", str(GOOGL), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "by a vote of 3 policies" in printed and "/3 members" in printed
    order = json.loads((out / "next_order.json").read_text())
    assert order["members"] == 3 and set(order["agreement"]) == {"direction", "leverage", "risk"}
    assert all(1 <= n <= 3 for n in order["agreement"].values())


def test_a_contest_held_again_without_the_vote_ships_the_incumbent(voted, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(voted[0], run)
    assert train_main(["--resume", str(run), "--set", "train.vote=false"]) == 0
    assert not (run / "vote.json").exists()
    assert "vote" not in json.loads((run / "challenger.json").read_text())
    assert not isinstance(load_trained(run).trained, Vote)


def _contest(root: Path, restarts: tuple[float, float], challenger: float) -> RunDir:
    """A run with two incumbent restarts and a challenger, each validated once at its Sharpe,
    each with a best model of its own bytes; the incumbent is its better restart, as
    `keep_best_restart` leaves it."""
    run = RunDir(root)
    incumbent = run.contender("incumbent")
    better = incumbent.restart(1 + int(restarts[1] > restarts[0]))
    sharpes = {
        incumbent.restart(1): restarts[0],
        incumbent.restart(2): restarts[1],
        run.contender("challenger"): challenger,
        incumbent: max(restarts),
    }
    for folder, sharpe in sharpes.items():
        folder.root.mkdir(parents=True, exist_ok=True)
        folder.validation_history.write_text(
            json.dumps([{"timesteps": 128, "sharpe": sharpe, "years": 4.0}])
        )
        source = better if folder == incumbent else folder
        folder.best_model.write_bytes(str(source.root.relative_to(root)).encode())
    return run


@pytest.mark.parametrize(
    ("restarts", "challenger", "vote", "kept", "adopted"),
    [
        # The incumbent kept: its restarts and the challenger vote; it competed as restart 1
        ((1.0, 0.5), 0.5, True, "incumbent", "incumbent/restart_1"),
        ((1.0, 0.5), 2.0, True, "challenger", "challenger"),  # the challenger ships alone
        ((1.0, 0.5), 0.5, False, "incumbent", "incumbent/restart_1"),  # no vote: alone
        # Restart 2 validated best, yet a vote picks no restart: the challenger's 1.5 beats
        # restart 1's 0.5 by more than the margin, 0.75, so it is kept; without the vote, the
        # best restart's 2.0 keeps the incumbent
        ((0.5, 2.0), 1.5, True, "challenger", "challenger"),
        ((0.5, 2.0), 1.5, False, "incumbent", "incumbent/restart_2"),
    ],
)
def test_the_vote_ships_only_where_the_contest_keeps_its_restart_1(
    tmp_path, restarts, challenger, vote, kept, adopted
):
    run = _contest(tmp_path, restarts, challenger)
    run.vote.write_text("{}")  # an earlier contest's vote: replaced or removed
    overrides = ['train.challenger=["train.direction_outcomes=1"]', "train.restarts=2"]
    rules = resolve_config(None, [*overrides, f"train.vote={str(vote).lower()}"]).train
    choice = keep_better_contender(run, rules)
    assert choice["kept"] == kept and run.best_model.read_text() == adopted
    shipped = vote and kept == "incumbent"
    assert ("vote" in choice) == shipped and run.vote.is_file() == shipped
    assert ("incumbent_restart" in choice) == vote
    if shipped:
        assert [p.relative_to(run.root).as_posix() for p in member_models(run)] == MEMBERS
        assert json.loads(run.vote.read_text())["members"] == MEMBERS
        assert "ships the vote of incumbent/restart_1" in format_contest(choice)


def test_a_vote_needs_a_challenger_and_restarts() -> None:
    for keys in (["train.vote=true", "train.restarts=2"], ["train.vote=true"]):
        with pytest.raises(ConfigError, match=r"train\.vote: .*train\.challenger is set"):
            resolve_config(None, keys)


def test_a_vote_of_copies_trades_through_folds_as_the_policy_does(smoke_run):
    """`trade_through` carries the vote's account across the boundary as a policy's."""
    policy = load_model(smoke_run).policy
    market = load_market_data(GOOGL)
    config = EnvConfig(window=16, episode_length=64)
    starts = [market.timestamps[1800], market.timestamps[2000]]
    vote = Vote((policy, policy, policy))
    through = trade_through([vote, vote], market, config, starts)
    single = trade_through([policy, policy], market, config, starts)
    assert through is not None and single is not None
    pd.testing.assert_frame_equal(through.records["agent"], single.records["agent"])
    core = evaluation_env(market, config, range(1800, 2335)).core
    pd.testing.assert_frame_equal(record_trained(vote, core)[0], record_trained(policy, core)[0])
    assert through.next_order is not None and single.next_order is not None
    assert through.next_order.action == single.next_order.action
    assert through.next_order.members == 3 and single.next_order.members == 1
    assert set(through.next_order.agreement.values()) == {3}

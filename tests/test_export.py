"""ONNX export: parity with torch on real held-out data, pruned and variant trunks, the CLI and
the README's onnxruntime-only example."""

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from agent import MultiHeadPolicy
from agent.pruning import prune_policy
from envs.config import HEAD_NAMES
from envs.core import TradingCore
from envs.execution import ACCOUNT_FEATURES
from envs.features import FEATURE_NAMES
from training import export
from training.export import (
    OUTPUTS,
    TOLERANCE,
    check_parity,
    export_policy,
    heldout_observations,
    load_run,
)
from training.run.data import load_run_market, split_run_market

REPO = Path(__file__).resolve().parents[1]

# The README's example, word for word ("agent.onnx" is replaced by the test's file).
README_EXAMPLE = """\
import json

import numpy as np
import onnxruntime as ort

from envs.features import compute_features, volatility_scale
from envs.market_data import load_market_data, time_labels

session = ort.InferenceSession("agent.onnx")
meta = {k: json.loads(v) for k, v in session.get_modelmeta().custom_metadata_map.items()}

bars = load_market_data("data/gymanytrading_GOOGL_daily.csv", adjust=meta["adjust"])
features = compute_features(  # [T, F]
    bars, meta["volume_window"], meta["bars_per_year"], tuple(meta["momentum_horizons"])
)
market = features[None, -meta["window"] :]  # [1, W, F]: the window ending at the last bar
account = np.zeros((1, len(meta["account_features"])), np.float32)  # a flat account
heads = ("direction", "leverage", "risk")
logits = session.run(list(heads), {"market": market, "account": account})  # 3 x [1, levels]
order = {h: meta[f"{h}_levels"][int(np.argmax(x[0]))] for h, x in zip(heads, logits, strict=True)}
scale = volatility_scale(  # [T]: the share of its level a position decided on a bar buys
    bars, meta["volatility_target_window"], meta["bars_per_year"], meta["volatility_target"]
)[-1]
risk = "no stop" if order["risk"] is None else f"risk {order['risk']:.0%}"
when = time_labels(bars.timestamps[-1:])[0]
print(
    f"{when} close -> next open: {order['direction']}, "
    f"leverage {order['leverage']:g}x sized to {order['leverage'] * scale:.3g}x, {risk}"
)
"""


def test_the_readme_shows_the_example_tested_here():
    readme = (REPO / "README.md").read_text()
    assert f"```python\n{README_EXAMPLE}```\n" in readme


def export_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "training.export", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def smoke(smoke_run):
    """(policy, run config, held-out observations (market, account)) of the smoke run."""
    policy, cfg = load_run(smoke_run)
    market = load_run_market(cfg)
    test_bars = split_run_market(market, cfg.data).test
    return policy, cfg, heldout_observations(policy, market, cfg.env, test_bars)


def test_export_matches_torch_on_the_googl_test_split(smoke):
    policy, cfg, (market, account) = smoke
    policy.set_training_mode(False)
    model = export_policy(policy, cfg.env, adjust=cfg.data.adjust)
    assert not policy.training  # the exporter's mode switching is undone
    parity = check_parity(model, policy, market, account)
    assert parity.samples > 500  # two rollouts over the ~350-bar test split
    assert parity.ok, parity.format()
    assert max(parity.max_abs_diff.values()) <= TOLERANCE
    assert len(np.unique(account, axis=0)) > 100  # positions vary: the account input is exercised

    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["market", "account"]
    assert [o.name for o in session.get_outputs()] == list(OUTPUTS)
    assert session.get_inputs()[0].shape == ["batch", cfg.env.window, len(FEATURE_NAMES)]
    one = session.run(None, {"market": market[:1], "account": account[:1]})  # batch of 1
    assert [o.shape for o in one] == [(1, 3), (1, 4), (1, 4), (1,)]
    meta = {k: json.loads(v) for k, v in session.get_modelmeta().custom_metadata_map.items()}
    assert meta["direction_levels"] == ["short", "flat", "long"]
    assert meta["leverage_levels"] == list(cfg.env.leverage_levels)
    assert meta["risk_levels"] == list(cfg.env.risk_levels)
    assert meta["window"] == cfg.env.window == 16
    assert meta["feature_names"] == list(FEATURE_NAMES)
    assert meta["account_features"] == list(ACCOUNT_FEATURES)
    assert meta["format_version"] == export.FORMAT_VERSION


@pytest.mark.parametrize("keep", [[[True, False]], [[False, False]]], ids=["one-head", "no-head"])
def test_pruned_policy_exports_with_parity(smoke, keep):
    policy, cfg, (market, account) = smoke
    pruned = prune_policy(policy, torch.tensor(keep))
    assert pruned.features_extractor.trunk.config.heads_per_layer == (sum(keep[0]),)
    parity = check_parity(export_policy(pruned, cfg.env, adjust=False), pruned, market, account)
    assert parity.ok, parity.format()


@pytest.mark.parametrize(
    "trunk",
    [
        dict(n_layers=2, attention="collaborative", pooling="cls", residual="admin"),
        dict(layout="deep_single_head", pooling="mean", residual="post_ln"),
    ],
    ids=["collaborative-cls-admin", "deep-single-head-mean-post-ln"],
)
def test_trunk_variants_export_with_parity(smoke, trunk):
    policy, cfg, (market, account) = smoke
    torch.manual_seed(0)
    variant = MultiHeadPolicy(
        policy.observation_space,
        policy.action_space,
        lambda _: 3e-4,
        trunk=dict(d_model=16, n_heads=2, **trunk),
        account_dim=16,
        head_hidden=16,
        flat_direction_index=cfg.env.flat_direction_index,
    )
    for head in HEAD_NAMES:  # sharpen the near-uniform initial heads so the argmax means much
        torch.nn.init.normal_(getattr(variant.decision_heads, head).logits.weight, std=1.0)
    n_blocks = variant.features_extractor.trunk.head_gates.shape[0]
    keep = torch.ones_like(variant.features_extractor.trunk.head_gates, dtype=torch.bool)
    keep[n_blocks - 1] = False  # the last block keeps no head
    for candidate in (variant, prune_policy(variant, keep)):
        model = export_policy(candidate, cfg.env, adjust=False)
        parity = check_parity(model, candidate, market, account)
        assert parity.ok, parity.format()


def test_parity_catches_a_different_model(smoke):
    policy, cfg, (market, account) = smoke
    other = prune_policy(policy, torch.ones(1, 2, dtype=torch.bool))
    with torch.no_grad():
        other.value_net.bias += 1e-3
        other.decision_heads.direction.logits.bias.copy_(torch.tensor([0.0, 0.0, 10.0]))
    parity = check_parity(export_policy(other, cfg.env, adjust=False), policy, market, account)
    assert not parity.ok
    assert parity.max_abs_diff["value"] == pytest.approx(1e-3, rel=1e-2)
    assert parity.argmax_mismatches["direction"] > 0
    assert "argmax differs" in parity.format()


def test_cli_writes_the_file_and_prints_the_parity(smoke_run, tmp_path):
    out = tmp_path / "deploy" / "agent.onnx"
    result = export_cli("--model", str(smoke_run), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert out.is_file() and not list(out.parent.glob("*.tmp"))
    assert "parity on the test split of gymanytrading_GOOGL_daily.csv" in result.stdout
    assert "argmax identical" in result.stdout
    assert f"wrote {out}" in result.stdout


@pytest.mark.parametrize(
    ("model", "out", "message"),
    [
        ("missing", "agent.onnx", "no such model file or run folder"),
        (None, "blocker/agent.onnx", "cannot write it"),
    ],
    ids=["missing-run", "unwritable-out"],
)
def test_cli_user_mistakes_are_one_line_and_exit_2(
    smoke_run, tmp_path, capsys, model, out, message
):
    (tmp_path / "blocker").write_text("a file where the output folder should be")
    model_path = smoke_run if model is None else tmp_path / model
    assert export.main(["--model", str(model_path), "--out", str(tmp_path / out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err
    assert not list(tmp_path.rglob("*.onnx"))


def test_cli_never_replaces_an_earlier_export(smoke_run, tmp_path, capsys):
    out = tmp_path / "agent.onnx"
    out.write_bytes(b"an earlier export")
    assert export.main(["--model", str(smoke_run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"error: {tmp_path}: already holds agent.onnx from an earlier run; pass another" in err
    assert out.read_bytes() == b"an earlier export"


def test_cli_parity_failure_is_one_line_and_writes_nothing(
    smoke_run, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr(export, "TOLERANCE", 0.0)  # no rounding difference is allowed now
    out = tmp_path / "agent.onnx"
    assert export.main(["--model", str(smoke_run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: parity on the test split") and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize("volatility_target", [None, 0.05])
def test_readme_example_decides_the_order_with_onnxruntime_alone(
    smoke, tmp_path, volatility_target
):
    """Also for an agent sized by a volatility budget: the example sizes the level as the
    env does at that bar (`TradingCore.scale`)."""
    policy, cfg, _ = smoke
    env_config = dataclasses.replace(cfg.env, volatility_target=volatility_target)
    model = tmp_path / "agent.onnx"
    model.write_bytes(export_policy(policy, env_config, adjust=cfg.data.adjust))
    probe = "\nimport sys\nprint(sorted({'torch', 'envs.batched_env'} & set(sys.modules)))\n"
    code = README_EXAMPLE.replace('"agent.onnx"', repr(str(model))) + probe
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    order_line, loaded = result.stdout.strip().splitlines()

    core = TradingCore(load_run_market(cfg), env_config)
    last = len(core.market) - 1
    obs = {
        "market": core.market_windows(np.array([last])),
        "account": np.zeros((1, len(ACCOUNT_FEATURES)), np.float32),
    }
    action = core.action_names(policy.predict(obs, deterministic=True)[0][0])
    sized = action["leverage"] * core.scale[last]
    assert (sized < action["leverage"]) == (volatility_target is not None)
    risk = "no stop" if math.isinf(action["risk"]) else f"risk {action['risk']:.0%}"
    expected = (
        f"2018-08-29 close -> next open: {action['direction']}, "
        f"leverage {action['leverage']:g}x sized to {sized:.3g}x, {risk}"
    )
    assert order_line == expected
    assert loaded == "[]"

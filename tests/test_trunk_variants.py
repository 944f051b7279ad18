"""Trunk variants: collaborative heads, deep single-head layout, post-LN and Admin; each trains."""

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from agent.attention import CollaborativeAttention, SelfAttention
from agent.config import TrunkConfig
from agent.trunk import AttentionTrunk, admin_profiling_batch
from envs import TradingEnv
from training.config import ConfigError, load_config
from training.run.data import data_files
from training.run.folder import load_model
from training.train import main as train_main

REPO = Path(__file__).resolve().parents[1]
SHAPE = dict(d_model=16, n_heads=4, n_layers=2)
DATA = dict(window=8, n_features=3)  # the shape of the market windows the trunk reads
VARIANTS = {
    "collaborative": ["trunk.attention=collaborative", "trunk.d_shared=8"],
    "deep_single_head": ["trunk.layout=deep_single_head"],
    "deep_single_head_admin": ["trunk.layout=deep_single_head", "trunk.residual=admin"],
}


def config(**overrides) -> TrunkConfig:
    return TrunkConfig(**{**SHAPE, **overrides})


def test_collaborative_attention_with_full_shared_size_represents_standard_attention():
    """Shared W_Q, W_K = the per-head ones side by side, m_i = indicator of head i's slice."""
    torch.manual_seed(0)
    standard = SelfAttention(config())
    collaborative = CollaborativeAttention(config(attention="collaborative"))
    d = standard.d_model
    with torch.no_grad():
        torch.nn.init.normal_(standard.qkv.bias)  # non-zero biases: the content-bias term counts
        w_q, w_k, w_v = standard.qkv.weight.split(d)
        b_q, b_k, b_v = standard.qkv.bias.split(d)
        collaborative.qk.weight.copy_(torch.cat([w_q, w_k]))
        collaborative.qk.bias.copy_(torch.cat([b_q, b_k]))
        collaborative.value.weight.copy_(w_v)
        collaborative.value.bias.copy_(b_v)
        collaborative.proj.load_state_dict(standard.proj.state_dict())
        indicator = torch.zeros(4, d)
        for head in range(4):
            indicator[head, head * 4 : (head + 1) * 4] = 1.0
        collaborative.mixing.copy_(indicator)
    x = torch.randn(5, 8, d)
    gate = torch.tensor([1.0, 0.0, 0.5, 1.0])
    torch.testing.assert_close(collaborative(x), standard(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(collaborative(x, gate), standard(x, gate), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        collaborative.attention_weights(x), standard.attention_weights(x), atol=1e-6, rtol=1e-5
    )
    assert collaborative.mixing.detach().equal(
        CollaborativeAttention(config(attention="collaborative")).mixing
    )


@pytest.mark.parametrize("attention", ["standard", "collaborative"])
def test_attention_weights_are_the_weights_sdpa_applies(attention):
    torch.manual_seed(0)
    attn = (SelfAttention if attention == "standard" else CollaborativeAttention)(
        config(attention=attention, d_shared=8 if attention == "collaborative" else None)
    )
    x = torch.randn(3, 8, 16)
    weights = attn.attention_weights(x)  # [B, nh, T, T]
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 8))
    _, _, v = attn.project(x)
    heads = (weights @ v).transpose(1, 2).reshape(3, 8, 16)  # [B, T, nh * hs]
    torch.testing.assert_close(attn(x), attn.proj(heads), atol=1e-5, rtol=1e-5)


def test_deep_single_head_keeps_heads_head_width_and_weight_count():
    multi = AttentionTrunk(config(), **DATA)
    deep = AttentionTrunk(config(layout="deep_single_head"), **DATA)
    assert len(deep.blocks) == 8 and all(b.attn.n_heads == 1 for b in deep.blocks)
    assert deep.head_gates.shape == (8, 1) and multi.head_gates.shape == (2, 4)
    assert deep.blocks[0].attn.head_dim == multi.blocks[0].attn.head_dim == 4
    assert deep.blocks[0].mlp.fc.out_features * 4 == multi.blocks[0].mlp.fc.out_features

    def weights(trunk: AttentionTrunk) -> int:  # matrices only
        return sum(p.numel() for p in trunk.blocks.parameters() if p.dim() == 2)

    def everything(trunk: AttentionTrunk) -> int:
        return sum(p.numel() for p in trunk.parameters())

    assert weights(deep) == weights(multi)
    extra_blocks = 8 - 2
    assert everything(deep) - everything(multi) == extra_blocks * 6 * 16  # 2 biases, 2 LayerNorms


def test_admin_omegas_follow_the_profiled_variances():
    torch.manual_seed(0)
    trunk = AttentionTrunk(config(layout="deep_single_head", residual="admin"), **DATA)
    x = trunk.embed(admin_profiling_batch(trunk.window, trunk.n_features))
    first = trunk.blocks[0]
    torch.testing.assert_close(first.omega[0], torch.ones(16))  # the first branch: 1
    with torch.no_grad():
        out = first.attn(x)
        expected = math.sqrt(float(x.var() + out.var()))
    torch.testing.assert_close(first.omega[1], torch.full((16,), expected))
    omegas = [float(block.omega[i, 0].detach()) for block in trunk.blocks for i in (0, 1)]
    assert omegas[-1] > omegas[2] > 0  # the accumulated variance grows with depth
    trunk(torch.randn(2, 8, 3)).sum().backward()
    assert first.omega.grad is not None  # omega is trained


def test_post_ln_block_normalises_its_output():
    torch.manual_seed(0)
    trunk = AttentionTrunk(config(residual="post_ln"), **DATA)
    x = trunk.blocks[0](torch.randn(2, 8, 16))
    torch.testing.assert_close(x.mean(-1), torch.zeros(2, 8), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["trunk.layout=deep_single_head", "trunk.attention=collaborative"],
            "trunk.attention: expected 'standard' with layout 'deep_single_head'",
        ),
        (["trunk.d_shared=6"], "trunk.d_shared: expected null or a positive multiple of"),
        (["trunk.heads_per_layer=[4]"], "trunk.heads_per_layer: expected null or 2 head counts"),
        (["trunk.attention=mixed"], "trunk.attention: expected one of 'standard'"),
    ],
)
def test_bad_variant_settings_are_one_line_config_errors(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_config(None, overrides)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_trains_from_smoke_config_and_loads_back(tmp_path, variant):
    run = tmp_path / variant
    overrides = [
        "train.total_timesteps=128",
        "train.checkpoint_every=0",
        "train.eval_every=0",
        *VARIANTS[variant],
    ]
    args = ["--config", str(REPO / "configs/smoke.yaml"), "--run-dir", str(run)]
    assert train_main([*args, *(f"--set={item}" for item in overrides)]) == 0
    policy = load_model(run / "final_model.safetensors").policy
    trunk = policy.trunk
    cfg = load_config(run / "config.yaml")
    assert policy.trunk_config == dataclasses.asdict(cfg.trunk)
    assert trunk.config == cfg.trunk and len(trunk.blocks) == cfg.trunk.n_blocks
    env = TradingEnv(data_files(cfg.data)[0], cfg.env, random_start=False, episode_length=None)
    obs, _ = env.reset(seed=0)
    action, _ = policy.predict(obs, deterministic=True)
    assert env.action_space.contains(action)

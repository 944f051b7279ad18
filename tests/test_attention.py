"""Attention, block and trunk: shapes, numerical identities, head gates and initialisation."""

import math

import numpy as np
import pytest
import torch

from agent.attention import SelfAttention
from agent.config import TrunkConfig
from agent.trunk import AttentionTrunk

TINY = dict(d_model=16, n_heads=2, n_layers=1)
DATA = dict(window=8, n_features=3)  # the shape of the market windows the trunk reads


def tiny_config(**overrides) -> TrunkConfig:
    return TrunkConfig(**{**TINY, **overrides})


def reference_heads(attn: SelfAttention, x: torch.Tensor) -> torch.Tensor:
    """Hand-written softmax attention: per-head outputs side by side, [B, T, C], no projection."""
    q, k, v = (x @ attn.qkv.weight.T + attn.qkv.bias).split(attn.d_model, dim=2)
    hs = attn.d_model // attn.n_heads
    heads = []
    for h in range(attn.n_heads):
        cols = slice(h * hs, (h + 1) * hs)
        scores = q[..., cols] @ k[..., cols].transpose(1, 2) / math.sqrt(hs)  # [B, T, T]
        heads.append(torch.softmax(scores, dim=-1) @ v[..., cols])  # [B, T, hs]
    return torch.cat(heads, dim=2)


@pytest.mark.parametrize("pooling", ["last", "mean", "cls"])
@pytest.mark.parametrize("init", ["xavier", "normal"])
def test_trunk_output_shape(pooling, init):
    trunk = AttentionTrunk(tiny_config(pooling=pooling, init=init, n_layers=2), **DATA)
    out = trunk(torch.randn(5, 8, 3))
    assert out.shape == (5, 16)
    assert trunk.output_dim == 16


def test_sdpa_matches_softmax_attention():
    torch.manual_seed(0)
    attn = SelfAttention(tiny_config())
    x = torch.randn(4, 8, 16)
    expected = attn.proj(reference_heads(attn, x))
    torch.testing.assert_close(attn(x), expected, atol=1e-5, rtol=1e-5)


def test_attention_is_not_causal():
    torch.manual_seed(0)
    trunk = AttentionTrunk(tiny_config(pooling="last"), **DATA)
    x = torch.randn(1, 8, 3)
    x_changed = x.clone()
    x_changed[0, 0] += 1.0  # the oldest bar
    assert not torch.allclose(trunk(x), trunk(x_changed))


@pytest.mark.parametrize("head", [0, 1])
def test_zero_gate_removes_exactly_that_head(head):
    torch.manual_seed(0)
    attn = SelfAttention(tiny_config())
    x = torch.randn(4, 8, 16)
    heads = reference_heads(attn, x)
    hs = attn.d_model // attn.n_heads
    heads[..., head * hs : (head + 1) * hs] = 0.0
    gate = torch.ones(attn.n_heads)
    gate[head] = 0.0
    torch.testing.assert_close(attn(x, gate), attn.proj(heads), atol=1e-5, rtol=1e-5)


def test_all_ones_gates_equal_the_ungated_path():
    torch.manual_seed(0)
    attn = SelfAttention(tiny_config())
    x = torch.randn(4, 8, 16)
    torch.testing.assert_close(attn(x, torch.ones(2)), attn(x))

    trunk = AttentionTrunk(tiny_config(n_layers=2), **DATA)
    market = torch.randn(4, 8, 3)
    ungated = trunk(market)
    trunk.set_head_gates(torch.ones(2, 2))
    assert not trunk._gates_active
    torch.testing.assert_close(trunk(market), ungated)
    with trunk.gate_gradients():  # forces the multiply
        torch.testing.assert_close(trunk(market), ungated)


def test_set_head_gates_prunes_and_survives_load_state_dict():
    torch.manual_seed(0)
    trunk = AttentionTrunk(tiny_config(n_layers=2), **DATA)
    market = torch.randn(4, 8, 3)
    ungated = trunk(market)
    gates = torch.ones(2, 2)
    gates[1, 0] = 0.0
    trunk.set_head_gates(gates)
    pruned = trunk(market)
    assert not torch.allclose(pruned, ungated)

    restored = AttentionTrunk(tiny_config(n_layers=2), **DATA)
    restored.load_state_dict(trunk.state_dict())
    torch.testing.assert_close(restored.head_gates, gates)
    torch.testing.assert_close(restored(market), pruned)


def test_gate_gradients_match_finite_differences():
    torch.manual_seed(0)
    trunk = AttentionTrunk(tiny_config(n_layers=2), **DATA).double()
    market = torch.randn(4, 8, 3, dtype=torch.float64)
    with trunk.gate_gradients() as gates:
        trunk(market).square().sum().backward()
    assert not trunk.head_gates.requires_grad
    grad = gates.grad.clone()
    eps = 1e-6
    for layer in range(2):
        for head in range(2):
            shifted = torch.ones(2, 2, dtype=torch.float64)
            shifted[layer, head] += eps
            trunk.set_head_gates(shifted)
            loss_up = trunk(market).square().sum()
            shifted[layer, head] -= 2 * eps
            trunk.set_head_gates(shifted)
            loss_down = trunk(market).square().sum()
            numeric = (loss_up - loss_down) / (2 * eps)
            torch.testing.assert_close(grad[layer, head], numeric, atol=1e-5, rtol=1e-4)


def test_xavier_init_bounds_and_zero_biases():
    torch.manual_seed(0)
    trunk = AttentionTrunk(tiny_config(), window=8, n_features=16)
    block = trunk.blocks[0]
    d = 16
    weights = {  # name -> (weight, Glorot bound sqrt(6 / (fan_in + fan_out)))
        "input_proj": (trunk.input_proj.weight, math.sqrt(6 / (16 + d))),
        "proj": (block.attn.proj.weight, math.sqrt(6 / (d + d))),
        "mlp.fc": (block.mlp.fc.weight, math.sqrt(6 / (d + 4 * d))),
        "mlp.proj": (block.mlp.proj.weight, math.sqrt(6 / (4 * d + d))),
    }
    for name, weight in zip("qkv", block.attn.qkv.weight.chunk(3, dim=0), strict=True):
        weights[f"W^{name.upper()}"] = (weight, math.sqrt(6 / (d + d)))  # one d x d projection each
    for name, (weight, bound) in weights.items():
        assert weight.abs().max() <= bound, name
        assert weight.abs().max() > 0.8 * bound, name  # uniform on [-b, b], not a narrower law
    for module in trunk.modules():
        if isinstance(module, torch.nn.Linear):
            assert torch.all(module.bias == 0)
    assert trunk.pos_emb.std().item() == pytest.approx(0.02, rel=0.3)


def test_normal_init_std():
    torch.manual_seed(0)
    trunk = AttentionTrunk(tiny_config(d_model=64, n_heads=4, init="normal"), **DATA)
    assert trunk.blocks[0].attn.qkv.weight.std().item() == pytest.approx(0.02, rel=0.1)
    assert trunk.blocks[0].mlp.fc.weight.std().item() == pytest.approx(0.02, rel=0.1)


@pytest.mark.parametrize("residual", ["pre_ln", "post_ln", "admin"])
@pytest.mark.parametrize("attention", ["standard", "collaborative"])
def test_last_pooling_computes_only_the_last_token_with_the_same_result(residual, attention):
    torch.manual_seed(0)
    config = TrunkConfig(
        d_model=16,
        n_heads=2,
        n_layers=2,
        pooling="last",
        residual=residual,
        attention=attention,
    )
    trunk = AttentionTrunk(config, window=8, n_features=5).eval()
    market = torch.randn(4, 8, 5)
    x = trunk.embed(market)
    for block in trunk.blocks:  # every token through every block, then pool the last one
        x = block(x)
    np.testing.assert_allclose(trunk(market).detach(), trunk.pool(x).detach(), atol=1e-6)

"""SB3 features extractor: attention trunk over the market window + MLP over the account state."""

from __future__ import annotations

from typing import Any

import torch
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from agent.attention import init_linear
from agent.config import TrunkConfig
from agent.trunk import AttentionTrunk


class MarketAccountExtractor(BaseFeaturesExtractor):
    """Encode the Dict observation ``{"market": [B, W, F], "account": [B, A]}`` into one vector.

    The `AttentionTrunk` encodes the market window into [B, d_model]; a two-layer MLP (GELU, like
    the trunk's MLPs) encodes the account state into [B, account_dim]; the two are concatenated,
    so ``features_dim = d_model + account_dim``. The account features should be roughly unit
    scale (normalised by the environment). The account MLP is Xavier-initialised with zero biases,
    like the trunk (see `agent.attention.init_linear`).

    Args:
        observation_space: Dict space with Box entries "market" (window, n_features) and
            "account" (n_account,).
        trunk: `TrunkConfig` or a dict of its fields. The window and the features per bar are
            the observation space's.
        account_dim: width of the account MLP.
        use_bf16: run the trunk under bfloat16 autocast when its input is on CUDA (ignored on
            CPU); the features are cast back to float32 for the heads.
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        trunk: TrunkConfig | dict[str, Any] | None = None,
        account_dim: int = 64,
        use_bf16: bool = False,
    ) -> None:
        market, account = observation_space["market"], observation_space["account"]
        if not isinstance(market, spaces.Box) or not isinstance(account, spaces.Box):
            raise ValueError(f"expected Box spaces market and account, got {observation_space}")
        window, n_features = market.shape
        (n_account,) = account.shape
        if not isinstance(trunk, TrunkConfig):
            trunk = TrunkConfig(**(trunk or {}))
        super().__init__(observation_space, features_dim=trunk.d_model + account_dim)
        self.use_bf16 = use_bf16
        self.trunk = AttentionTrunk(trunk, window, n_features)
        self.account_mlp = nn.Sequential(
            nn.Linear(n_account, account_dim),
            nn.GELU(),
            nn.Linear(account_dim, account_dim),
            nn.GELU(),
        )
        for module in self.account_mlp:
            if isinstance(module, nn.Linear):
                init_linear(module, trunk.init)

    def market_latent(self, market: torch.Tensor) -> torch.Tensor:
        """The market half of the features: windows [B, W, F] -> float32 [B, d_model]."""
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.use_bf16 and market.is_cuda):
            return self.trunk(market).float()  # [B, d_model]

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        """{"market": [B, W, F], "account": [B, A]} -> [B, d_model + account_dim]."""
        market_latent = self.market_latent(observations["market"])  # [B, d_model]
        account_latent = self.account_mlp(observations["account"])  # [B, account_dim]
        return torch.cat([market_latent, account_latent], dim=1)  # [B, features_dim]

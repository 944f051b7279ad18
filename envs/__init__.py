"""Market data, causal features and the multi-head trading environments.

Registers `MultiHeadTrading-v0`: ``gymnasium.make("MultiHeadTrading-v0", data="data/x.csv")``
accepts a CSV path, a DataFrame or a `MarketData`, plus any `EnvConfig` field as a keyword.
"""

from gymnasium.envs.registration import register

from envs.batched_env import BatchedTradingEnv
from envs.config import EnvConfig
from envs.market_data import DataError, MarketData, load_market_data
from envs.trading_env import TradingEnv

register(id="MultiHeadTrading-v0", entry_point="envs.trading_env:TradingEnv")

__all__ = [
    "BatchedTradingEnv",
    "DataError",
    "EnvConfig",
    "MarketData",
    "TradingEnv",
    "load_market_data",
]

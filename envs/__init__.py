"""Market data, causal features and the multi-head trading environments.

Registers `MultiHeadTrading-v0`: ``gymnasium.make("MultiHeadTrading-v0", data="data/x.csv")``
accepts a CSV path, a DataFrame or a `MarketData`, plus any `EnvConfig` field as a keyword.

The environments are imported on first use (a module ``__getattr__``, PEP 562):
`BatchedTradingEnv` needs stable-baselines3 and torch, `TradingEnv` numba. So ``import
envs.market_data`` and ``import envs.features`` load neither, and a model exported to ONNX runs
with onnxruntime alone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gymnasium.envs.registration import register

from envs.config import EnvConfig
from envs.market_data import DataError, MarketData, load_instruments, load_market_data

if TYPE_CHECKING:
    from envs.batched_env import BatchedTradingEnv
    from envs.trading_env import TradingEnv

register(id="MultiHeadTrading-v0", entry_point="envs.trading_env:TradingEnv")

__all__ = [
    "BatchedTradingEnv",
    "DataError",
    "EnvConfig",
    "MarketData",
    "TradingEnv",
    "load_instruments",
    "load_market_data",
]

_LAZY = {"BatchedTradingEnv": "envs.batched_env", "TradingEnv": "envs.trading_env"}  # name: module


def __getattr__(name: str) -> Any:
    """`BatchedTradingEnv` and `TradingEnv`, imported from their modules on first access."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # later accesses find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

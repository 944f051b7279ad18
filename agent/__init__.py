"""The agent: attention trunk, direction/leverage/risk heads and the SB3 policy that joins them."""

from agent.config import TrunkConfig
from agent.distribution import MultiHeadDistribution
from agent.extractor import MarketAccountExtractor
from agent.heads import DecisionHeads
from agent.policy import MultiHeadPolicy, built_like, policy_of
from agent.trunk import AttentionTrunk

__all__ = [
    "AttentionTrunk",
    "DecisionHeads",
    "MarketAccountExtractor",
    "MultiHeadDistribution",
    "MultiHeadPolicy",
    "TrunkConfig",
    "built_like",
    "policy_of",
]

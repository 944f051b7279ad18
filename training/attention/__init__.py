"""Attention-head analysis: importance, pruning, attention maps and their pictures."""

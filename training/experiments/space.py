"""Search spaces: dotted config keys mapped to a distribution, parsed and sampled reproducibly.

A space file is YAML, one entry per key of the run config (`training.config`)::

    ppo.learning_rate: {loguniform: [1.0e-4, 1.0e-3]}  # lo <= x <= hi, log-uniform (*)
    ppo.ent_coef: {uniform: [0.0, 0.02]}               # lo <= x <= hi (*)
    ppo.n_epochs: {randint: [2, 6]}                    # integers lo <= x < hi, as Ray's randint
    trunk.n_layers: {choice: [1, 2]}                   # one of the values, equally likely

(*) rounded to 4 significant digits, so plans and summaries stay readable.

An unknown key, a section instead of a key, a malformed distribution, or a value the config does
not accept raises `SpaceError`: one line naming the file and the key.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from training.config import ConfigError, config_to_dict, load_config

KINDS = ("choice", "uniform", "loguniform", "randint")


class SpaceError(ConfigError):
    """A search-space mistake, as one line naming the file and the key."""


@dataclass(frozen=True)
class Distribution:
    """One key's distribution: `kind` in `KINDS` and its arguments (choice values, or lo, hi)."""

    kind: str
    args: tuple[Any, ...]

    def sample(self, rng: np.random.Generator) -> Any:
        """One draw from `rng`, as a plain Python value (int, float, str, list, ...)."""
        if self.kind == "choice":
            return self.args[int(rng.integers(len(self.args)))]
        lo, hi = self.args
        if self.kind == "uniform":
            return _readable(rng.uniform(lo, hi))
        if self.kind == "loguniform":
            return _readable(np.exp(rng.uniform(np.log(lo), np.log(hi))))
        return int(rng.integers(lo, hi))  # randint: hi excluded

    def bounds(self) -> list[Any]:
        """Values to check against the config upfront: every choice, or the two ends."""
        if self.kind == "choice":
            return list(self.args)
        lo, hi = self.args
        return [lo, hi - 1] if self.kind == "randint" else [lo, hi]

    def to_dict(self) -> dict[str, list[Any]]:
        """The YAML form, `{kind: [args]}`."""
        return {self.kind: list(self.args)}


def _readable(x: float) -> float:
    """`x` to 4 significant digits: plans and summaries stay readable (`0.0003162`)."""
    return float(f"{x:.4g}")


def override(key: str, value: Any) -> str:
    """A `--set` string for `key` = `value` (JSON is YAML, so `load_config` reads it back)."""
    return f"{key}={json.dumps(value)}"


def flat_keys(config: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Every leaf key of a nested config mapping, dotted ('ppo.learning_rate', ...)."""
    keys: list[str] = []
    for name, value in config.items():
        if isinstance(value, Mapping):
            keys += flat_keys(value, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _distribution(where: str, spec: Any) -> Distribution:
    """Parse one `{kind: args}` mapping; `SpaceError` prefixed with `where` when malformed."""
    if not isinstance(spec, Mapping) or len(spec) != 1 or next(iter(spec)) not in KINDS:
        raise SpaceError(f"{where}: expected one of {{{'|'.join(KINDS)}: [...]}}, got {spec!r}")
    kind, args = next(iter(spec.items()))
    if not isinstance(args, list) or not args:
        raise SpaceError(f"{where}: {kind}: expected a non-empty list, got {args!r}")
    if kind == "choice":
        return Distribution(kind, tuple(args))
    if len(args) != 2 or not all(_is_number(a) for a in args):
        raise SpaceError(f"{where}: {kind}: expected [lo, hi] numbers, got {args!r}")
    lo, hi = args
    if kind == "randint" and not all(isinstance(a, int) for a in args):
        raise SpaceError(f"{where}: randint: expected [lo, hi] integers, got {args!r}")
    if not lo < hi:
        raise SpaceError(f"{where}: {kind}: expected lo < hi, got {args!r}")
    if kind == "loguniform" and lo <= 0:
        raise SpaceError(f"{where}: loguniform: expected 0 < lo < hi, got {args!r}")
    return Distribution(kind, (lo, hi))


def parse_space(
    raw: Any, label: str, base_config: str | Path, base_overrides: Sequence[str] = ()
) -> dict[str, Distribution]:
    """The distributions of mapping `raw` (read from `label`), checked against the run config
    `base_config` plus `base_overrides`: each key must be one of its leaf keys, and each choice
    value (or range end) must be accepted by `load_config`. `SpaceError` otherwise (one line)."""
    if not isinstance(raw, Mapping) or not raw:
        raise SpaceError(f"{label}: expected a mapping of dotted config keys, got {raw!r}")
    known = flat_keys(config_to_dict(load_config(base_config, base_overrides)))
    space: dict[str, Distribution] = {}
    for key, spec in raw.items():
        if not isinstance(key, str) or key not in known:
            match = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean {match[0]!r}?)" if match else ""
            raise SpaceError(f"{label}: unknown config key {key!r}{hint}")
        dist = _distribution(f"{label}: {key}", spec)
        for value in dist.bounds():
            try:
                load_config(base_config, [*base_overrides, override(key, value)])
            except ConfigError as error:
                detail = str(error).split(": ", 1)[-1].removeprefix(f"{key}: ")  # no '--set: key'
                raise SpaceError(f"{label}: {key}: {dist.kind} value {value!r}: {detail}") from None
        space[key] = dist
    return space


def read_space(
    path: str | Path, base_config: str | Path, base_overrides: Sequence[str] = ()
) -> dict[str, Distribution]:
    """`parse_space` of YAML file `path`; a missing or unreadable file is one `SpaceError` line."""
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpaceError(f"{path}: no such search-space file") from None
    except yaml.YAMLError as error:
        detail = " ".join(str(getattr(error, "problem", None) or error).split())
        raise SpaceError(f"{path}: invalid YAML: {detail}") from None
    return parse_space(raw, str(path), base_config, base_overrides)


def sample_configs(
    space: Mapping[str, Distribution], samples: int, seed: int
) -> list[dict[str, Any]]:
    """`samples` draws of every key of `space` (in its order) from `numpy.random.default_rng(seed)`:
    the same space, count and seed give the same list on any machine."""
    rng = np.random.default_rng(seed)
    return [{key: dist.sample(rng) for key, dist in space.items()} for _ in range(samples)]

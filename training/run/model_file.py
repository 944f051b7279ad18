"""Model files: tensors and plain metadata in safetensors, so that reading one runs no code.

An SB3 zip, and anything `torch.save` writes, holds pickled Python objects, and unpickling runs
whatever the file says. A safetensors file is a JSON header (names, dtypes, shapes, string
metadata) followed by raw tensor bytes: reading it runs nothing from the file. The policy itself
is never in the file. It is built in code from the run's `config.yaml`
(`training.run.folder.load_model`), and only its tensors are loaded, after their names and shapes
are checked against it.

A model file written by `write_model_file` holds:

- tensors ``policy.<name>``: the policy's `state_dict()`, each tensor once (SB3 registers the
  shared features extractor under three names; the first one is kept, `policy_tensors`);
- tensors ``optimizer.<i>.<name>`` (checkpoints only): the optimizer's state of parameter i
  (Adam: ``exp_avg``, ``exp_avg_sq``);
- string metadata: ``format`` (`FORMAT`), ``format_version`` (`FORMAT_VERSION`),
  ``num_timesteps``, ``spaces`` (JSON: the observation shapes and the levels of each head the
  policy was built for) and, in checkpoints, ``optimizer`` (JSON: the param_groups, whose
  hyper-parameters and parameter indices torch keeps there, and each parameter's scalar state,
  such as Adam's step count, as value and dtype).

Everything read back is checked (`read_model_file`, `load_policy_tensors`, `load_optimizer_state`);
a file that is not ours, or does not fit the policy, is a `ModelError` of one line naming it.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from gymnasium import spaces
from safetensors import SafetensorError, safe_open
from safetensors.torch import save
from stable_baselines3.common.policies import BasePolicy

from training.run.atomic import write_bytes_atomic

FORMAT = "multihead-trading-agent"  # metadata `format`: what the file holds
FORMAT_VERSION = "1"  # bump when the tensors or the metadata change meaning
SUFFIX = ".safetensors"
_POLICY = "policy."
_OPTIMIZER = "optimizer."
# Dtypes a scalar optimizer state may have (Adam's step is float32), by the name written.
_SCALAR_DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64}
_ONLY_OURS = "this version loads only .safetensors model files written by training.train"
_PICKLED = "holds pickled Python objects that run code when loaded"


class ModelError(ValueError):
    """A path that is not a model file of ours, or one that does not fit its run (one line)."""


@dataclass(frozen=True)
class ModelFile:
    """What a model file holds, read and checked by `read_model_file`."""

    policy: dict[str, torch.Tensor]  # `policy_tensors` of the saved policy
    num_timesteps: int  # environment steps trained when it was saved
    spaces: dict[str, list[int]]  # `space_shapes` of the policy
    optimizer: dict[str, Any] | None  # a torch optimizer `state_dict()`; None unless checkpoint


def policy_tensors(policy: BasePolicy) -> dict[str, torch.Tensor]:
    """The policy's `state_dict()` with each parameter or buffer once, under its first name."""
    seen: set[int] = set()
    unique = {}
    for name, value in policy.state_dict(keep_vars=True).items():
        if id(value) not in seen:
            seen.add(id(value))
            unique[name] = value.detach()
    return unique


def space_shapes(policy: BasePolicy) -> dict[str, list[int]]:
    """The observation shapes (by key) and the levels of each head: what `policy` is built for."""
    observation_space, action_space = policy.observation_space, policy.action_space
    assert isinstance(observation_space, spaces.Dict)  # the envs' observations
    assert isinstance(action_space, spaces.MultiDiscrete)  # one dimension per head
    shapes = {key: list(space.shape or ()) for key, space in observation_space.spaces.items()}
    return {**shapes, "levels": [int(n) for n in action_space.nvec]}


def write_model_file(
    path: Path, policy: BasePolicy, num_timesteps: int, *, with_optimizer: bool = False
) -> Path:
    """Write `policy`'s tensors (`with_optimizer`: and its optimizer's state) to `path`
    atomically (module doc)."""
    tensors = {_POLICY + name: value for name, value in policy_tensors(policy).items()}
    metadata = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "num_timesteps": str(int(num_timesteps)),
        "spaces": json.dumps(space_shapes(policy)),
    }
    if with_optimizer:
        state = policy.optimizer.state_dict()
        scalars: dict[str, dict[str, Any]] = {}
        for index, entries in state["state"].items():
            for name, value in entries.items():
                if not isinstance(value, torch.Tensor):
                    raise TypeError(f"optimizer state {name} of parameter {index} is no tensor")
                if value.dim() == 0:
                    dtype = str(value.dtype).removeprefix("torch.")
                    scalars.setdefault(str(index), {})[name] = [value.item(), dtype]
                else:
                    tensors[f"{_OPTIMIZER}{index}.{name}"] = value.detach()
        metadata["optimizer"] = json.dumps({"param_groups": state["param_groups"],
                                            "scalars": scalars})  # fmt: skip
    data = save({name: value.to("cpu").contiguous() for name, value in tensors.items()}, metadata)
    return write_bytes_atomic(path, data)


def read_model_file(path: Path) -> ModelFile:
    """Read a model file written by `write_model_file`; `ModelError` for anything else.

    A zip archive (an SB3 model, a `torch.save` file) or a pickle is refused before anything in it
    is read, as is a file that is not safetensors, another format or a later version.
    """
    with path.open("rb") as file:
        head = file.read(9)
    # safetensors starts with its header's length (u64, little-endian) and the header's "{". Only
    # a file without that layout is named a zip or a pickle: a header length of 128 + 256k also
    # starts with the byte that opens a pickle. safetensors never unpickles either way.
    header_length = int.from_bytes(head[:8], "little")
    if head[8:] != b"{" or 8 + header_length > path.stat().st_size:
        if zipfile.is_zipfile(path):
            what = (
                "an SB3 zip"
                if path.suffix == ".zip"
                else "a zip archive (an SB3 or torch.save file)"
            )
            raise ModelError(f"{path}: {what} {_PICKLED}; {_ONLY_OURS} (retrain the run)")
        if head[:1] == b"\x80":  # a pickle's PROTO opcode (protocol 2 and later; torch.save's)
            raise ModelError(f"{path}: a pickle {_PICKLED}; {_ONLY_OURS} (retrain the run)")
    try:
        with safe_open(str(path), framework="pt", device="cpu") as file:
            metadata = file.metadata() or {}
            _check_format(path, metadata)
            names = file.keys()  # safe_open is not iterable
            tensors = {name: file.get_tensor(name) for name in names}
    except SafetensorError as error:
        cause = " ".join(str(error).split())
        raise ModelError(f"{path}: not a safetensors file ({cause}); {_ONLY_OURS}") from None
    try:
        num_timesteps = int(metadata["num_timesteps"])
        shapes = json.loads(metadata["spaces"])
        optimizer = (
            _optimizer_state(json.loads(metadata["optimizer"]), tensors)
            if "optimizer" in metadata
            else None
        )
    except (KeyError, ValueError, TypeError, IndexError) as error:
        raise ModelError(f"{path}: damaged metadata of a model file ({error!r})") from None
    unknown = [n for n in tensors if not n.startswith((_POLICY, _OPTIMIZER))]
    if unknown:
        raise ModelError(f"{path}: unexpected tensors in a model file: {_names(unknown)}")
    policy = {n.removeprefix(_POLICY): t for n, t in tensors.items() if n.startswith(_POLICY)}
    return ModelFile(policy, num_timesteps, shapes, optimizer)


def _check_format(path: Path, metadata: Mapping[str, str]) -> None:
    """Raise `ModelError` unless the metadata names our format, in this version."""
    found = metadata.get("format")
    if found != FORMAT:
        raise ModelError(
            f"{path}: a safetensors file, but not a model written by training.train "
            f"(format {found!r}, expected {FORMAT!r})"
        )
    version = metadata.get("format_version")
    if version != FORMAT_VERSION:
        raise ModelError(
            f"{path}: model file format version {version!r}; this version reads "
            f"{FORMAT_VERSION!r} (retrain the run, or use the version that wrote it)"
        )


def _optimizer_state(saved: dict[str, Any], tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """A torch optimizer `state_dict()` from the JSON metadata and the ``optimizer.`` tensors."""
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, tensor in tensors.items():
        if name.startswith(_OPTIMIZER):
            index, key = name.removeprefix(_OPTIMIZER).split(".", 1)
            state.setdefault(int(index), {})[key] = tensor
    for index, entries in saved["scalars"].items():
        for key, (value, dtype) in entries.items():
            state.setdefault(int(index), {})[key] = torch.tensor(value, dtype=_SCALAR_DTYPES[dtype])
    groups = saved["param_groups"]
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        raise TypeError("param_groups is not a list of mappings")
    return {"state": dict(sorted(state.items())), "param_groups": groups}


def load_policy_tensors(policy: BasePolicy, saved: ModelFile, path: Path) -> None:
    """Copy the file's tensors into `policy` after checking names, shapes and dtypes.

    `policy` must be built for the file's spaces (`ModelFile.spaces`): a mismatch of those, or of
    any tensor, is a `ModelError` naming the file and the first differences.
    """
    built = space_shapes(policy)
    if built != saved.spaces:
        raise ModelError(
            f"{path}: the model was trained for observation shapes and levels per head "
            f"{_shapes(saved.spaces)}, the policy its config.yaml builds has {_shapes(built)}"
        )
    expected = policy_tensors(policy)
    missing = [name for name in expected if name not in saved.policy]
    unexpected = [name for name in saved.policy if name not in expected]
    differ = [
        f"{name} {list(saved.policy[name].shape)} {saved.policy[name].dtype} vs "
        f"{list(value.shape)} {value.dtype}"
        for name, value in expected.items()
        if name in saved.policy
        and (saved.policy[name].shape != value.shape or saved.policy[name].dtype != value.dtype)
    ]
    if missing or unexpected or differ:
        found = {"missing": missing, "unexpected": unexpected, "differ": differ}
        parts = [f"{what}: {_names(names)}" for what, names in found.items() if names]
        raise ModelError(
            f"{path}: its tensors do not fit the policy its config.yaml builds ({'; '.join(parts)})"
        )
    with torch.no_grad():
        for name, value in expected.items():
            value.copy_(saved.policy[name])


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: ModelFile, path: Path) -> None:
    """Load a checkpoint's optimizer state into `optimizer`, checked against its parameters."""
    if saved.optimizer is None:
        raise ModelError(f"{path}: no optimizer state in this model file (not a checkpoint)")
    params = [p for group in optimizer.param_groups for p in group["params"]]
    groups = saved.optimizer["param_groups"]
    counts = [len(group.get("params", ())) for group in groups]
    if counts != [len(group["params"]) for group in optimizer.param_groups]:
        raise ModelError(
            f"{path}: optimizer parameter groups of sizes {counts} do not fit the model"
        )
    for index, entries in saved.optimizer["state"].items():
        for key, value in entries.items():
            if value.dim() and (index >= len(params) or value.shape != params[index].shape):
                raise ModelError(f"{path}: optimizer state {key} of parameter {index} does not fit")
    try:
        optimizer.load_state_dict(saved.optimizer)
    except (ValueError, KeyError, TypeError) as error:
        raise ModelError(f"{path}: optimizer state does not fit the model ({error})") from None


def _shapes(shapes: dict[str, list[int]]) -> str:
    return ", ".join(f"{key} {value}" for key, value in shapes.items())


def _names(names: list[str], shown: int = 3) -> str:
    """The first `shown` names, and how many more."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more

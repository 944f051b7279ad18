"""Model files are data, never code: safetensors written and read back, crafted files refused.

A crafted model file whose payload would create a marker file is given to every entry point that
takes a model (`training.backtest`, `training.heads`, `training.export` with `--model`, and
`training.train --resume`): each exits 2 with one line naming the file, and the marker is never
created. The payloads are an SB3-style zip with a pickled `__reduce__` in its `data` JSON (what
`PPO.load` unpickled before this format), that zip under a `.safetensors` name, a `torch.save`
file renamed, and a bare pickle renamed.
"""

import base64
import json
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save

from envs import TradingEnv
from envs.core import env_spaces
from training.backtest import main as backtest_main
from training.config import load_config, resolve_config, save_config
from training.export import main as export_main
from training.heads import main as heads_main
from training.run.folder import (
    MODEL_NAMES,
    RunDir,
    build_policy,
    load_model,
    locate_model,
)
from training.run.model_file import ModelError, policy_tensors, read_model_file, write_model_file
from training.train import main as train_main

REPO = Path(__file__).resolve().parents[1]
GOOGL = REPO / "data" / "gymanytrading_GOOGL_daily.csv"
SMOKE = REPO / "configs" / "smoke.yaml"
PICKLED = "pickled Python objects that run code when loaded"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --- the crafted files ------------------------------------------------------------------------


class Payload:
    """Unpickling this object runs `open(marker, "w")`: code chosen by whoever wrote the file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


def sb3_zip(marker: Path) -> bytes:
    """An SB3 model zip whose `data` JSON holds a cloudpickled value, as `BaseAlgorithm.save`
    writes one (`:serialized:` base64 pickles that `PPO.load` unpickles)."""
    payload = base64.b64encode(pickle.dumps(Payload(marker))).decode()
    data = {"policy_class": {":type:": "<class 'abc.ABCMeta'>", ":serialized:": payload}}
    path = marker.parent / "sb3.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("data", json.dumps(data))
        archive.writestr("_stable_baselines3_version", "2.9.2")
    return path.read_bytes()


def torch_save(marker: Path) -> bytes:
    """What `torch.save` writes for a mapping holding the payload (a zip with a pickle)."""
    path = marker.parent / "weights.pt"
    torch.save({"extra": Payload(marker)}, path)
    return path.read_bytes()


def bare_pickle(marker: Path) -> bytes:
    """A pickle on its own (torch.save's legacy format is one)."""
    return pickle.dumps({"weight": [0.0, 0.0], "extra": Payload(marker)})


CRAFTED: dict[str, tuple[Callable[[Path], bytes], str]] = {  # kind: (bytes, file name)
    "sb3-zip": (sb3_zip, "best_model.zip"),
    "sb3-zip-named-safetensors": (sb3_zip, "best_model.safetensors"),
    "torch-save-renamed": (torch_save, "best_model.safetensors"),
    "pickle-renamed": (bare_pickle, "best_model.safetensors"),
}


def test_the_payloads_do_run_code_when_unpickled(tmp_path):
    """The check below means something: each payload, unpickled, creates its marker."""
    for kind, (make, _) in CRAFTED.items():
        marker = tmp_path / f"marker-{kind}"
        data = make(marker)
        if kind.startswith("sb3"):
            with zipfile.ZipFile(tmp_path / "sb3.zip") as archive:
                serialized = json.loads(archive.read("data"))["policy_class"][":serialized:"]
            data = base64.b64decode(serialized)
        elif kind == "torch-save-renamed":
            with zipfile.ZipFile(tmp_path / "weights.pt") as archive:
                (name,) = [n for n in archive.namelist() if n.endswith("data.pkl")]
                data = archive.read(name)
        pickle.loads(data)  # bytes in memory, as the loaders of SB3 and torch would read them
        assert marker.exists(), kind


def crafted_run(folder: Path, kind: str, marker: Path) -> Path:
    """A run folder (the smoke config) whose model, and whose newest checkpoint, are `kind`."""
    make, name = CRAFTED[kind]
    folder.mkdir(parents=True)
    save_config(resolve_config(SMOKE), folder / "config.yaml")
    data = make(marker)
    (folder / name).write_bytes(data)
    checkpoint = folder / "checkpoints" / name.replace("best_model", "checkpoint_256_steps")
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(data)
    return folder / name


ENTRY_POINTS = {  # name: (main, arguments for the run folder and the model file)
    "backtest": (backtest_main, lambda run, model: ["--model", str(model), "--data", str(GOOGL),
                                                    "--out", str(run / "out")]),
    "backtest-run-folder": (backtest_main, lambda run, model: ["--model", str(run), "--data",
                                                               str(GOOGL)]),
    "heads": (heads_main, lambda run, model: ["--model", str(model), "--data", str(GOOGL)]),
    "heads-prune": (heads_main, lambda run, model: ["prune", "--model", str(run), "--data",
                                                    str(GOOGL)]),
    "export": (export_main, lambda run, model: ["--model", str(model), "--out",
                                                str(run / "x.onnx")]),
    "train-resume": (train_main, lambda run, model: ["--resume", str(run)]),
}  # fmt: skip


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("kind", list(CRAFTED))
def test_a_crafted_model_file_is_refused_and_never_runs(tmp_path, capsys, kind, entry):
    marker = tmp_path / "marker"
    run = tmp_path / "run"
    model = crafted_run(run, kind, marker)
    main, arguments = ENTRY_POINTS[entry]
    code = main(arguments(run, model))
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    named = model.name.replace("best_model", "checkpoint_256_steps") if "train" in entry else model
    assert f"{named}: " in err and PICKLED in err, err
    assert not marker.exists()
    assert not (run / "out").exists() and not (run / "x.onnx").exists()


# --- writing and reading ----------------------------------------------------------------------


def test_env_spaces_are_those_of_the_env():
    cfg = resolve_config(SMOKE)
    for long_only in (False, True):
        cfg.env.long_only = long_only
        env = TradingEnv(GOOGL, cfg.env)
        assert env_spaces(cfg.env) == (env.observation_space, env.action_space)


def trained_looking_run(folder: Path, overrides: tuple[str, ...] = ()) -> Path:
    """A run folder with a config and a best model whose tensors are random (not the init)."""
    cfg = resolve_config(SMOKE, list(overrides))
    folder.mkdir(parents=True, exist_ok=True)
    save_config(cfg, folder / "config.yaml")
    policy = build_policy(cfg)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for value in policy_tensors(policy).values():
            if value.is_floating_point():
                value.copy_(torch.randn(value.shape, generator=generator))
    return write_model_file(RunDir(folder).best_model, policy, 1234)


def test_a_model_file_holds_tensors_and_plain_metadata_and_loads_back(tmp_path):
    path = trained_looking_run(tmp_path / "run")
    written = policy_tensors(load_model(tmp_path / "run").policy)
    saved = read_model_file(path)
    assert saved.num_timesteps == 1234 and saved.optimizer is None
    assert saved.spaces == {"market": [16, 7], "account": [8], "levels": [3, 4, 4]}
    assert saved.policy.keys() == written.keys()
    assert all(torch.equal(saved.policy[k], v) for k, v in written.items())
    assert not any(k.startswith(("pi_features", "vf_features")) for k in saved.policy)  # shared
    raw = path.read_bytes()
    header = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])
    assert set(header["__metadata__"]) == {"format", "format_version", "num_timesteps", "spaces"}

    loaded = load_model(tmp_path / "run")
    assert (loaded.path, loaded.run_dir, loaded.num_timesteps) == (path, tmp_path / "run", 1234)
    assert not loaded.policy.training  # evaluation mode
    env = TradingEnv(GOOGL, loaded.config.env, random_start=False, episode_length=None)
    obs, _ = env.reset(seed=0)
    again = load_model(path).policy
    np.testing.assert_array_equal(
        loaded.policy.predict(obs, deterministic=True)[0],
        again.predict(obs, deterministic=True)[0],
    )


def test_a_header_length_that_starts_like_a_pickle_still_loads(tmp_path):
    """A safetensors header of 128 + 256k bytes starts with 0x80, a pickle's first byte: such a
    model file (one in 256 of a sweep's) was once refused as a pickle."""
    path = trained_looking_run(tmp_path / "run")
    saved = read_model_file(path)
    with safe_open(str(path), framework="pt") as file:
        metadata = file.metadata()
    tensors = {"policy." + name: value for name, value in saved.policy.items()}
    for pad in range(256):
        data = save(tensors, {**metadata, "note": "x" * pad})
        if data[0] == 0x80:
            break
    padded = tmp_path / "padded.safetensors"
    padded.write_bytes(data)
    again = read_model_file(padded)
    assert data[0] == 0x80 and again.num_timesteps == 1234
    assert all(torch.equal(again.policy[k], v) for k, v in saved.policy.items())


def test_loading_leaves_the_global_random_state_alone(tmp_path):
    trained_looking_run(tmp_path / "run")
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    load_model(tmp_path / "run")
    assert torch.equal(torch.rand(3), expected)


def test_a_pruned_config_builds_the_smaller_trunk_before_its_tensors_load(tmp_path):
    path = trained_looking_run(tmp_path / "run", ("trunk.heads_per_layer=[0]",))
    loaded = load_model(path)
    assert loaded.policy.trunk.blocks[0].attn.n_heads == 0  # an empty head slice loads too


def test_a_run_folder_of_an_earlier_version_names_its_zip_and_says_to_retrain(tmp_path, capsys):
    folder = tmp_path / "old"
    folder.mkdir()
    save_config(resolve_config(SMOKE), folder / "config.yaml")
    with zipfile.ZipFile(folder / "best_model.zip", "w") as archive:
        archive.writestr("data", "{}")
    assert locate_model(folder) == (folder / "best_model.zip", folder)
    code = backtest_main(["--model", str(folder), "--data", str(GOOGL)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{folder / 'best_model.zip'}: an SB3 zip holds {PICKLED}" in err
    assert "loads only .safetensors model files written by training.train (retrain the run)" in err


def test_an_empty_run_folder_names_the_model_files_it_looks_for(tmp_path):
    with pytest.raises(ModelError, match=r"no best_model\.safetensors or final_model\.safetensors"):
        locate_model(tmp_path)
    assert MODEL_NAMES == ("best_model", "final_model")


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"format": "pt"}, "not a model written by training.train (format 'pt'"),
        ({"format": "multihead-trading-agent", "format_version": "9"}, "format version '9'"),
        ({"format": "multihead-trading-agent", "format_version": "1"}, "damaged metadata"),
    ],
)
def test_a_safetensors_file_not_of_our_format_is_refused(tmp_path, metadata, message):
    from safetensors.torch import save_file

    path = tmp_path / "model.safetensors"
    save_file({"policy.x": torch.zeros(1)}, path, metadata)
    with pytest.raises(ModelError, match=message.replace("(", r"\(")):
        read_model_file(path)


def test_tensors_that_do_not_fit_the_config_are_one_line_naming_the_file(tmp_path):
    path = trained_looking_run(tmp_path / "run")
    config = tmp_path / "run" / "config.yaml"
    cfg = load_config(config)
    cfg.policy.head_hidden = 8
    save_config(cfg, config)
    with pytest.raises(ModelError) as error:
        load_model(path)
    text = str(error.value)
    assert text.startswith(f"{path}: its tensors do not fit the policy its config.yaml builds")
    assert "differ: " in text and "\n" not in text


def test_no_module_of_the_project_unpickles_a_model():
    """`PPO.load`, `torch.load`, `pickle.load(s)` and SB3's `.load` of a policy are gone."""
    banned = ("PPO.load", "torch.load", "pickle.load", "Policy.load(", "cloudpickle")
    found = [
        f"{path.relative_to(REPO)}: {word}"
        for folder in ("agent", "envs", "training", "benchmarks")
        for path in (REPO / folder).rglob("*.py")
        for word in banned
        if word in path.read_text()
    ]
    assert found == []

"""Run a sweep's trials under Ray Tune, each as a `python -m training.train` subprocess.

A trial is an ordinary training run: the function trainable `run_trial` starts
`python -m training.train --config CFG [--data CSV] --run-dir DIR --set ...` in the repository
root with the worker's Python, its stdout and stderr going to `OUT/logs/<folder>.out|.err`, and
reports to Tune:

- while it runs, each new entry of its `validation.json` (`timesteps`, `validation_sharpe`), so
  a scheduler such as ASHA can stop a bad trial early;
- at the end, `status` ('done' or 'failed') and, for a failed run, the last line of its stderr.
  A failed run is a result, not a Tune error: it never sinks the other trials.

The subprocess dies with the worker that started it (Linux `PR_SET_PDEATHSIG`), so a trial
stopped by the scheduler, or a sweep ended with Ctrl-C, leaves no training behind.

With no address, Ray starts locally inside the command (no dashboard, usage stats off), always
a new instance: plain `ray.init()` would join the last cluster started on this machine, or hang
for minutes retrying it when it is gone. It gets the cores this process may use, a small object
store (trials pass Ray only small dicts) and a temp folder of its own, short (Ray's sockets live
there; a Unix socket path has at most 107 bytes) and removed when the sweep ends. With an
address (or `RAY_ADDRESS`) it joins that cluster. Run folders, logs and the data are addressed
by absolute paths, so on a cluster they must be on a filesystem every node sees at the same
path, and every node needs this repository and its virtual environment at the same path.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from training.config import REPO_ROOT

POLL_SECONDS = 2.0  # how often a running trial's validation.json is read
OBJECT_STORE_BYTES = 80 * 1024**2  # a local Ray's shared memory (Ray's minimum is 75 MiB)
_PR_SET_PDEATHSIG = 1


class ClusterError(ConnectionError):
    """No Ray cluster could be reached at the given address (one line)."""


@dataclass(frozen=True)
class Job:
    """One trial to run now: its id, its run folder and the training command's arguments."""

    trial_id: str
    run_dir: str  # absolute; must not exist yet
    args: list[str]  # arguments of `python -m training.train`, --run-dir included
    log_stem: str  # absolute path of the logs, without the .out/.err suffix


@dataclass(frozen=True)
class Outcome:
    """How a trial ended in this session: 'done', 'failed' or 'stopped' (by the scheduler)."""

    trial_id: str
    status: str
    run_dir: str
    error: str | None = None  # the last line of stderr (failed), or Ray's error


def training_command(job: Job) -> list[str]:
    """The command line of `job`'s training run."""
    return [sys.executable, "-m", "training.train", *job.args]


def last_line(path: Path) -> str:
    """The last non-empty line of text file `path` ('' when there is none)."""
    with contextlib.suppress(OSError):
        lines = path.read_text(errors="replace").strip().splitlines()
        return lines[-1].strip() if lines else ""
    return ""


def _die_with_parent(parent: int) -> Callable[[], None]:
    """A `preexec_fn`: the child gets SIGKILL when the thread that started it ends."""

    def preexec() -> None:
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before prctl
            os._exit(1)

    return preexec


def _validation_entries(run_dir: Path) -> list[dict[str, Any]]:
    """The entries of `run_dir/validation.json` so far ([] while there is none)."""
    try:
        entries = json.loads((run_dir / "validation.json").read_text())
    except (OSError, ValueError):
        return []
    return entries if isinstance(entries, list) else []


def run_trial(config: dict[str, Any]) -> None:
    """Ray Tune function trainable: run `config["job"]` (a `Job` as a dict); see module doc."""
    from ray import tune

    job = Job(**config["job"])
    run_dir, log = Path(job.run_dir), Path(job.log_stem)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with (
        open(f"{log}.out", "wb") as out,
        open(f"{log}.err", "wb") as err,
        subprocess.Popen(
            training_command(job),
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=err,
            preexec_fn=_die_with_parent(os.getpid()),
        ) as process,
    ):
        seen, last = 0, {"timesteps": 0, "validation_sharpe": math.nan}
        while process.poll() is None:
            time.sleep(POLL_SECONDS)
            entries = _validation_entries(run_dir)
            for entry in entries[seen:]:
                sharpe = entry.get("sharpe")
                last = {
                    "timesteps": int(entry.get("timesteps", 0)),
                    "validation_sharpe": math.nan if sharpe is None else float(sharpe),
                }
                tune.report(last)
            seen = max(seen, len(entries))
    returncode = process.returncode
    done = returncode == 0 and (run_dir / "report" / "metrics.json").is_file()
    error = None if done else (last_line(Path(f"{log}.err")) or f"exit status {returncode}")
    # The last validation figures again: Tune checks that every result holds the metric.
    tune.report({**last, "status": "done" if done else "failed", "error": error})


class _Progress:
    """Tune callback body: one printed line per change (running, done, failed, stopped)."""

    def __init__(self, jobs: list[Job], on_outcome: Callable[[Outcome], None]) -> None:
        self.jobs = {job.trial_id: job for job in jobs}
        self.running: set[str] = set()
        self.outcomes: dict[str, Outcome] = {}
        self.on_outcome = on_outcome

    def _line(self, trial_id: str, what: str) -> None:
        counts = {s: sum(o.status == s for o in self.outcomes.values()) for s in _STATUSES}
        tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        tally = f"{len(self.running)} running" + (f", {tally}" if tally else "")
        print(f"[{tally} of {len(self.jobs)}] {trial_id} {what}", flush=True)

    def start(self, trial_id: str) -> None:
        self.running.add(trial_id)
        self._line(trial_id, f"running in {self.jobs[trial_id].run_dir}")

    def end(self, trial_id: str, result: dict[str, Any] | None, ray_error: str | None) -> None:
        self.running.discard(trial_id)
        job = self.jobs[trial_id]
        result = result or {}
        if ray_error is not None:
            outcome = Outcome(trial_id, "failed", job.run_dir, ray_error)
        elif result.get("status") in ("done", "failed"):
            outcome = Outcome(trial_id, result["status"], job.run_dir, result.get("error"))
        else:  # ended without a final report: the scheduler stopped it
            outcome = Outcome(trial_id, "stopped", job.run_dir)
        self.outcomes[trial_id] = outcome
        self.on_outcome(outcome)
        detail = {
            "done": "done",
            "failed": f"failed: {outcome.error}",
            "stopped": f"stopped early by the scheduler at {result.get('timesteps', '?')} steps",
        }[outcome.status]
        self._line(trial_id, detail)


_STATUSES = ("done", "failed", "stopped")


def _tune_callback(progress: _Progress) -> Any:
    """A `ray.tune.Callback` forwarding trial starts and ends to `progress`."""
    from ray import tune

    class ProgressCallback(tune.Callback):
        def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            progress.start(trial.config["job"]["trial_id"])

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            progress.end(trial.config["job"]["trial_id"], trial.last_result, None)

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            error = last_line(Path(trial.error_file)) if trial.error_file else ""
            progress.end(trial.config["job"]["trial_id"], None, error or "Ray trial error")

    return ProgressCallback()


def _check_reachable(address: str, timeout: float = 10.0) -> None:
    """`ClusterError` at once when `address` is `host:port` and nothing listens there (Ray
    itself retries a dead address for many minutes); other forms ('auto', 'ray://') pass."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as error:
        raise ClusterError(f"cannot reach a Ray cluster at {address}: {error}") from None


def local_cpus() -> int:
    """The CPU cores this process may use: its affinity, capped by a cgroup v2 quota."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpus = cpus or 1
    with contextlib.suppress(OSError, ValueError):
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, int(quota) // int(period)))
    return cpus


@contextlib.contextmanager
def ray_session(address: str | None) -> Iterator[str]:
    """Ray for the duration of the block: the cluster at `address` (or `RAY_ADDRESS`), else a
    local one started here (see the module doc). Yields a description."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = address or os.environ.get("RAY_ADDRESS") or None
    quiet: dict[str, Any] = dict(log_to_driver=False, configure_logging=True, logging_level="ERROR")
    temp_dir = None
    if address:
        _check_reachable(address)
        try:
            ray.init(address=address, **quiet)
        except ConnectionError as error:
            raise ClusterError(
                f"{error}; is the cluster up? A cluster with token authentication (Ray's default) "
                "also needs RAY_AUTH_MODE=token here, and its token in ~/.ray/auth_token or "
                "RAY_AUTH_TOKEN"
            ) from None
    else:
        temp_dir = tempfile.mkdtemp(prefix="ray-", dir=os.environ.get("RAY_TMPDIR", "/tmp"))
        try:
            ray.init(
                address="local",  # never a stale cluster
                include_dashboard=False,
                num_cpus=local_cpus(),
                object_store_memory=OBJECT_STORE_BYTES,
                _temp_dir=temp_dir,
                **quiet,
            )
        except BaseException:
            shutil.rmtree(temp_dir, ignore_errors=True)
            raise
    try:
        cpus = int(ray.cluster_resources().get("CPU", 0))
        gpus = int(ray.cluster_resources().get("GPU", 0))
        yield f"Ray {'cluster ' + address if address else 'local'}: {cpus} CPUs, {gpus} GPUs"
    finally:
        ray.shutdown()
        if temp_dir is not None:
            shutil.rmtree(temp_dir, ignore_errors=True)


def run_jobs(
    jobs: list[Job],
    storage: Path,
    trial_cpus: float,
    trial_gpus: float,
    scheduler: Any | None,
    on_outcome: Callable[[Outcome], None],
) -> dict[str, Outcome]:
    """Run `jobs` under Ray Tune (inside `ray_session`), `trial_cpus` CPUs and `trial_gpus` GPUs
    each, optionally under a Tune `scheduler`; Tune's own state goes to `storage`.

    Calls `on_outcome` as each trial ends (in the driver) and returns every outcome. Ctrl-C
    raises KeyboardInterrupt here (Tune's own SIGINT handler is turned off).
    """
    from ray import tune

    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    progress = _Progress(jobs, on_outcome)
    trainable = tune.with_resources(run_trial, {"cpu": trial_cpus, "gpu": trial_gpus})

    def name(trial: Any) -> str:
        return str(trial.config["job"]["trial_id"])

    tuner = tune.Tuner(
        trainable,
        param_space={"job": tune.grid_search([asdict(job) for job in jobs])},
        tune_config=tune.TuneConfig(
            scheduler=scheduler, trial_name_creator=name, trial_dirname_creator=name
        ),
        run_config=tune.RunConfig(
            name="tune",
            storage_path=str(storage.absolute()),
            verbose=0,
            callbacks=[_tune_callback(progress)],
            failure_config=tune.FailureConfig(max_failures=0),
        ),
    )
    tuner.fit()
    return progress.outcomes


def asha(max_timesteps: int, grace_timesteps: int) -> Any:
    """Ray's ASHA scheduler on the reported validation Sharpe, in training timesteps."""
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(
        time_attr="timesteps",
        metric="validation_sharpe",
        mode="max",
        max_t=max_timesteps,
        grace_period=grace_timesteps,
        reduction_factor=2,
        stop_last_trials=False,  # a trial at max_t still has its test backtest to write
    )

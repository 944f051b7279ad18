"""`training.backtest`'s default `--out` folder: built from the parsed dates, always in the run.

The dates a user types are free text, and pandas reads some odd text as a date
(``2017/../../../..`` is 2017-01-01): the folder name must come from the parsed date, never the
text, or ``--start`` could point the report anywhere.
"""

import shutil
from pathlib import Path

import pytest

from training.backtest import default_out, main, parse_args
from training.evaluation.backtest import BacktestError

REPO = Path(__file__).resolve().parents[1]
GOOGL = REPO / "data" / "gymanytrading_GOOGL_daily.csv"
STEM = "gymanytrading_GOOGL_daily"


def out_for(*extra: str, data: str = "data/gymanytrading_GOOGL_daily.csv") -> Path:
    args = parse_args(["--model", "runs/r", "--data", data, *extra])
    return default_out(Path("runs/r"), args)


@pytest.mark.parametrize(
    ("extra", "folder"),
    [
        ([], STEM),
        (["--start", "2017-06-30"], f"{STEM}-2017-06-30-to-last"),
        (["--end", "2017-12-31"], f"{STEM}-first-to-2017-12-31"),
        (["--start", "2017-06-30T10:00:00+02:00"], f"{STEM}-2017-06-30T0800-to-last"),  # UTC
        (["--end", "2018-01-02 15:30:05"], f"{STEM}-first-to-2018-01-02T153005"),
        (["--start", "2017/../../../.."], f"{STEM}-2017-01-01-to-last"),  # pandas: 2017-01-01
        (["--start", "../../2017-06-30"], f"{STEM}-2017-06-30-to-last"),
        (["--ticker", "BTC/USDT"], f"{STEM}-BTC_USDT"),
    ],
    ids=["none", "start", "end", "zone", "time", "dots", "dots-first", "ticker-slash"],
)
def test_default_out_is_one_folder_named_from_parsed_dates(extra, folder):
    assert out_for(*extra) == Path("runs/r/backtest") / folder


def test_default_out_refuses_an_unreadable_date():
    with pytest.raises(
        BacktestError, match=r"--start: expected a date such as 2017-06-30, got '\.\./\.\./x'"
    ):
        out_for("--start", "../../x")
    with pytest.raises(BacktestError, match=r"--end: expected a date"):
        out_for("--end", "x/../../..")


def test_cli_writes_only_inside_the_run_folder(smoke_run, tmp_path, capsys):
    run = tmp_path / "place" / "run"
    shutil.copytree(smoke_run, run, ignore=shutil.ignore_patterns("backtest", "tb"))
    before = set(tmp_path.rglob("*"))
    code = main(["--model", str(run), "--data", str(GOOGL), "--start", "../../x"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--start: expected a date" in err
    assert set(tmp_path.rglob("*")) == before

    assert main(["--model", str(run), "--data", str(GOOGL), "--start", "2017/../../../.."]) == 0
    assert main(["--model", str(run), "--data", str(GOOGL),
                 "--start", "2017-06-30T10:00:00+02:00"]) == 0  # fmt: skip
    new = {path.relative_to(tmp_path) for path in set(tmp_path.rglob("*")) - before}
    folders = {path.parts[:4] for path in new}
    assert folders == {
        ("place", "run", "backtest"),
        ("place", "run", "backtest", f"{STEM}-2017-01-01-to-last"),
        ("place", "run", "backtest", f"{STEM}-2017-06-30T0800-to-last"),
    }
    assert (run / "backtest" / f"{STEM}-2017-06-30T0800-to-last" / "metrics.json").is_file()


def test_running_again_keeps_the_earlier_report(smoke_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(smoke_run, run, ignore=shutil.ignore_patterns("backtest", "tb"))
    args = ["--model", str(run), "--data", str(GOOGL)]
    assert main(args) == 0 and main(args) == 0
    first, second = run / "backtest" / STEM, run / "backtest" / f"{STEM}-2"
    assert f"report: {second}" in capsys.readouterr().out
    assert (first / "metrics.json").read_bytes() == (second / "metrics.json").read_bytes()

    # An --out that holds a report is refused before anything is computed or written.
    before = {path: path.stat().st_mtime_ns for path in first.iterdir()}
    assert main([*args, "--out", str(first)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"error: {first}: already holds metrics.json, next_order.json" in err
    assert "pass another --out, or move them away" in err
    assert {path: path.stat().st_mtime_ns for path in first.iterdir()} == before
    # A folder holding other files only is fine.
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main([*args, "--out", str(other)]) == 0
    assert (other / "metrics.json").is_file() and (other / "notes.txt").read_text() == "mine"


def test_a_model_trained_with_adjust_backtests_a_file_without_an_adjusted_close(
    smoke_run, tmp_path, capsys
):
    # The default run adjusts the files that have an adjusted close and uses KO's as it is; its
    # model backtests on KO's file the same way, with the same warning.
    run = tmp_path / "run"
    shutil.copytree(smoke_run, run, ignore=shutil.ignore_patterns("backtest", "tb"))
    config = run / "config.yaml"
    config.write_text(config.read_text().replace("adjust: false", "adjust: true"))
    ko = REPO / "data" / "zipline_KO_daily.csv"
    with pytest.warns(UserWarning, match=r"data\.adjust: no adjusted close in zipline_KO_daily"):
        assert main(["--model", str(run), "--data", str(ko), "--out", str(tmp_path / "ko")]) == 0
    # Asked for explicitly, adjusting a file without one is a one-line error.
    assert main(["--model", str(run), "--data", str(ko), "--adjust"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing column Adj Close (adjust=True needs it)" in err

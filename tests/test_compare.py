"""`python -m profiler compare`: real runs on a tiny dataset, the noise test, the story, the CLI and its refusals."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from profiler import cli, vocab
from profiler.analysis import analyze
from profiler.analysis.compare import bootstrap, compare, versus
from profiler.config import RunConfig
from profiler.errors import UserError
from profiler.harness.data import make_sample_dataset
from profiler.harness.runner import execute, prepare
from profiler.record import load

BASE = dict(steps=6, warmup=2, workers=1, batch_size=8, model="none", image_size=64, out="unused")
# B emulates slow storage. Cold as well as throttled: run as root with cgroup blkio, the *kernel* throttle is used and
# it only slows real device reads, so on a warm page cache a throttled run is as fast as A. The userspace throttle
# (no root) charges every read either way, so "cold + throttle" is slow storage on every machine. 20 iops: ~2.4 s of
# reads for the 48 files, well above what a loaded 2-core machine adds to a 6-step run (at 50 iops, ~0.4 s of io
# stall was once matched by ~0.5 s of CPU contention in the baseline, and B came out no slower).
SLOW = dict(throttle="1MB/s,20iops", cache="cold")
# How the story names the io cause: the registry's words for it, then the cause's name.
IO_WORDS = f"{vocab.CAUSE['io'].words} (io)"


def _run(data: Path, out: Path, **kw) -> Path:
    rec = analyze(execute(prepare(RunConfig(data=str(data), **{**BASE, **kw}))))
    out.mkdir(parents=True, exist_ok=True)
    rec.save(out / "run.json")
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("compare")
    data = make_sample_dataset(tmp / "data", count=48, size=(160, 120))
    return {"a": _run(data, tmp / "a"), "b": _run(data, tmp / "b", **SLOW), "c": _run(data, tmp / "c", workers=2)}


def _recs(*dirs: Path) -> list:
    return [analyze(load(d)) for d in dirs]


def _metric(c: dict, key: str) -> dict:
    return next(m for m in c["metrics"] if m["key"] == key)


def test_slow_storage_is_slower_and_blamed_on_io(runs):
    c = compare(_recs(runs["a"], runs["b"]))
    thr = _metric(c, "throughput")
    vs = thr["vs_baseline"][1]
    assert vs["ratio"] < 1 and vs["significant"] is True and vs["ci"][1] < 1.0
    # the added wait is mostly io, by the attribution of both runs
    a, b = _recs(runs["a"], runs["b"])
    added = {k: b.stall["by_cause"][k] - a.stall["by_cause"][k] for k in vocab.CAUSE_NAMES}
    assert added["io"] > 0.5 * sum(v for v in added.values() if v > 0)
    assert _metric(c, "stall_io")["vs_baseline"][1]["significant"] is True
    assert _metric(c, "read_mean")["vs_baseline"][1]["ratio"] > 1
    s = c["sentences"]["B"]
    assert re.match(r"B is \d+(\.\d+)?x slower \(\S+ → \S+ samples/s\); \d+ % of the added wait is "
                    + re.escape(IO_WORDS), s)
    assert "throttle none → 1MB/s,20iops" in s and "cache as-is → cold" in s
    # every metric carries one value per run and a comparison for B
    for m in c["metrics"]:
        assert len(m["values"]) == 2 and m["vs_baseline"][0] is None and m["vs_baseline"][1] is not None
    json.dumps(c, allow_nan=False)  # the comparison is plain JSON


def test_reversed_pair_is_faster_and_says_what_fell(runs):
    c = compare(_recs(runs["b"], runs["a"]))
    s = c["sentences"]["B"]
    assert "x faster" in s and "the wait fell by" in s and IO_WORDS in s
    assert "throttle 1MB/s,20iops → none" in s


def test_run_against_itself_is_within_noise(runs):
    rec = _recs(runs["a"])[0]
    c = compare([rec, rec])
    for m in c["metrics"]:
        vs = m["vs_baseline"][1]
        if vs and vs.get("test"):
            assert vs["significant"] is False, m["key"]
    assert "within run-to-run noise" in c["sentences"]["B"] and "Same configuration." in c["sentences"]["B"]


def test_bootstrap_separates_shift_from_noise():
    g = np.random.default_rng(1)
    a, same, shifted = g.normal(10, 1, 300), g.normal(10, 1, 300), g.normal(11, 1, 300)
    rng = np.random.default_rng(0)
    ba, bs, bh = (bootstrap([x], ["mean", "p95"], rng) for x in (a, same, shifted))
    assert versus(a.mean(), same.mean(), ba["mean"], bs["mean"], "ratio")["significant"] is False
    v = versus(a.mean(), shifted.mean(), ba["mean"], bh["mean"], "ratio")
    assert v["significant"] is True and v["ci"][0] > 1.0 and v["test"] == "ratio"
    # a zero baseline has no ratio: the test falls back to the difference
    z = versus(0.0, 1.0, np.zeros(10), np.ones(10), "ratio")
    assert z["test"] == "difference" and z["significant"] is True and z["ratio"] is None
    # seeded: the same input gives the same interval
    r1 = bootstrap([a], ["mean"], np.random.default_rng(5))["mean"]
    r2 = bootstrap([a], ["mean"], np.random.default_rng(5))["mean"]
    assert np.array_equal(r1, r2)
    assert bootstrap([np.ones(1)], ["mean"], rng) is None  # one observation: no distribution, no test


def test_cli_end_to_end(runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert cli.main(["compare", str(runs["a"]), str(runs["b"] / "run.json"), "--out", str(out)]) == 0
    printed = " ".join(capsys.readouterr().out.split())  # rich wraps lines at the terminal width
    assert "slower" in printed and IO_WORDS in printed and "throughput" in printed
    for f in ("compare.html", "compare.png", "compare.json"):
        assert (out / f).stat().st_size > 0
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "compare.html").read_text()
    assert "data:image/png;base64," in html and "B is" in html
    # self-contained: no external resource (scripts, styles, images, fonts) of any kind
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html and "url(" not in html
    c = json.loads((out / "compare.json").read_text())
    assert c["labels"] == ["A", "B"] and c["sentences"]["B"].startswith("B is")


def test_default_out_dir(runs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["compare", str(runs["a"]), str(runs["c"])]) == 0
    made = list((tmp_path / "reports").glob("compare-*"))
    assert len(made) == 1 and re.fullmatch(r"compare-\d{8}-\d{6}", made[0].name)
    assert (made[0] / "compare.html").exists()


def test_model_mismatch_refused_unless_forced(runs, tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    d = json.loads((runs["a"] / "run.json").read_text())
    d["config"]["model"] = "tiny"
    d["config"]["batch_size"] = 16
    (other / "run.json").write_text(json.dumps(d))
    assert cli.main(["compare", str(runs["a"]), str(other), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model" in err and "batch size" in err and "--force" in err
    assert not (tmp_path / "x" / "compare.html").exists()
    assert cli.main(["compare", str(runs["a"]), str(other), "--out", str(tmp_path / "x"), "--force"]) == 0
    assert "--force" in capsys.readouterr().out
    assert (tmp_path / "x" / "compare.html").exists()


def test_mode_mismatch_is_a_user_error(runs):
    a, b = _recs(runs["a"], runs["a"])
    b.config["mode"] = "infer"
    with pytest.raises(UserError, match="mode"):
        compare([a, b])
    assert compare([a, b], force=True)["forced"]


@pytest.mark.parametrize("case", ["bogus", "one", "empty_dir", "bad_json", "not_a_record"])
def test_bad_input_exits_2_with_one_line(runs, tmp_path, capsys, case):
    a = str(runs["a"])
    if case == "bogus":
        argv = [a, str(tmp_path / "nope")]
    elif case == "one":
        argv = [a]
    elif case == "empty_dir":
        (tmp_path / "empty").mkdir()
        argv = [a, str(tmp_path / "empty")]
    elif case == "bad_json":
        (tmp_path / "run.json").write_text("{ not json")
        argv = [a, str(tmp_path / "run.json")]
    else:
        (tmp_path / "run.json").write_text(json.dumps({"hello": 1}))
        argv = [a, str(tmp_path)]
    assert cli.main(["compare", *argv, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("profiler: error:")
    if case == "empty_dir":
        assert "no run.json" in err
    if case == "one":
        assert "at least two runs" in err


def test_three_runs_compare_to_the_first(runs, tmp_path, capsys):
    out = tmp_path / "three"
    assert cli.main(["compare", str(runs["a"]), str(runs["b"]), str(runs["c"]), "--out", str(out)]) == 0
    c = json.loads((out / "compare.json").read_text())
    assert c["labels"] == ["A", "B", "C"] and set(c["sentences"]) == {"B", "C"}
    assert "workers 1 → 2" in c["sentences"]["C"]
    thr = _metric(c, "throughput")
    assert len(thr["values"]) == 3 and all(v is not None for v in thr["vs_baseline"][1:])
    html = (out / "compare.html").read_text()
    assert "C/A" in html and "B/A" in html
    printed = capsys.readouterr().out
    assert "C/A" in printed


def test_copied_run_folder_compares(runs, tmp_path):
    # a run folder moved to another machine (only run.json travels) still compares
    moved = tmp_path / "moved"
    shutil.copytree(runs["b"], moved)
    c = compare(_recs(runs["a"], moved))
    assert c["runs"][1]["steps"] == 6 and c["runs"][1]["samples"] == 48


def test_hostile_run_names_render_in_terminal_and_html(runs, tmp_path):
    """Run folder names are user text: rich markup, escape sequences and undecodable bytes neither style, crash nor
    reach the terminal raw (render side: compare_terminal, compare_html)."""
    from io import StringIO

    from rich.console import Console

    from profiler.render import COMPARE_FILES, write_compare
    from profiler.render.compare_terminal import print_comparison

    names = ["/runs/[/]a [bold]x[/bold]", "/runs/\x1b[31mb\x07" + b"\xff".decode("utf-8", "surrogateescape")]
    c = compare(_recs(runs["a"], runs["c"]), names=names)
    files = write_compare(c, tmp_path)
    assert [p.name for p in files] == list(COMPARE_FILES)
    buf = StringIO()
    print_comparison(c, Console(file=buf, width=200, force_terminal=False, color_system=None),
                     [str(f) for f in files])
    text = buf.getvalue()
    assert "\x1b" not in text and "\x07" not in text and "/runs/[/]a [bold]x[/bold]" in text
    assert "\\x1b[31mb\\x07\\xff" in text
    raw = (tmp_path / "compare.html").read_bytes()
    assert b"\x1b" not in raw
    page = raw.decode("utf-8")
    assert "/runs/[/]a [bold]x[/bold]" in page and "\\xff" in page
    json.loads((tmp_path / "compare.json").read_text())

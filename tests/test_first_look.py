"""The first look (issue 34, audited): what a reader sees in ten seconds says something true and useful in every
case the audit met on real runs — a run with no recommendation says why, a 20 ms window is not "0.0 s", a comparison
of one script's runs names what changed (its loader's workers) instead of "same configuration", the compare page's
lead picture is short enough for the first screen, and the ranks / attach headlines stay short.

One real built-in run (tiny model, 4 steps) is shared by the module; the cases are that run's record with one section
changed, so each test checks a renderer against a record it knows.
"""
from __future__ import annotations

import copy
import html as htmllib
import io
import re
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from rich.console import Console

from profiler.analysis import analyze
from profiler.analysis.headline import HEADLINE_WORDS_MAX, key_figures, no_change, ranks_headline
from profiler.config import RunConfig
from profiler.harness.data import make_sample_dataset
from profiler.harness.runner import execute, prepare
from profiler.record import RunRecord
from profiler.render.html import render_html


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunRecord:
    root = tmp_path_factory.mktemp("first_look")
    data = make_sample_dataset(root / "data", count=32, size=(160, 120))
    c = RunConfig(data=str(data), steps=4, warmup=1, workers=1, batch_size=8, model="tiny", image_size=64)
    return analyze(execute(prepare(c)))


def _with(rec: RunRecord, **sections: Any) -> RunRecord:
    rec = copy.deepcopy(rec)
    for k, v in sections.items():
        setattr(rec, k, v)
    return rec


def _short(rec: RunRecord) -> str:
    from profiler.render.terminal import print_report

    buf = io.StringIO()
    print_report(rec, Console(file=buf, width=80, force_terminal=False, color_system=None),
                 out_files=["/tmp/out/report.html"], details=False)
    return buf.getvalue()


def _pred(setting: str, change: float) -> dict[str, Any]:
    return {"kind": "workers", "setting": setting, "samples_per_s": 100.0 * (1 + change), "change": change,
            "interval": [90.0, 120.0], "binds": "cores", "binds_words": "cores: 2 workers share 1.2 of 2 cores",
            "assumption": "a"}


def test_no_recommendation_says_why_on_the_page_and_the_terminal(run: RunRecord) -> None:
    """A run that waited most of its time but got no advice (nothing the what-if tried gains 5 %): the "Do first" box
    and the short view say so, with the best setting's gain and what binds, not "nothing points to a change"."""
    whatif = dict(run.whatif, binds_words="cores: 2 workers share 1.2 of 2 cores", advice_rejected=[],
                  predictions=[_pred("workers=2", 0.01), _pred("workers=4", 0.03)])
    rec = _with(run, verdict=dict(run.verdict, bottleneck="cpu", recommendations=[]), whatif=whatif)
    why = no_change(rec)
    assert why == ("no setting the what-if tried gains 5 % or more (best: workers=4, +3 %); bound by cores: 2 workers "
                   "share 1.2 of 2 cores.")
    page = htmllib.unescape(render_html(rec, {}))  # the page alone (no plots drawn: the box is text)
    box = page[page.index('id="top-recommendation"'):]
    box = re.sub(r"<[^>]+>", "", box[:box.index("</div>")])
    assert "No change recommended: " + why in " ".join(box.split())
    short = _short(rec)
    assert "No change recommended: " + why in " ".join(short.split())
    assert len(short.splitlines()) <= 45
    # A larger gain whose advice the consistency check dropped: the dropped advice is named with its reason.
    dropped = dict(whatif, predictions=[_pred("workers=4", 0.9)],
                   advice_rejected=[{"action": "Use DataLoader workers: num_workers 1",
                                     "because": "the what-if puts 1 worker at +4 % (under 5 %)"}])
    assert no_change(_with(rec, whatif=dropped)).startswith(
        "“Use DataLoader workers: num_workers 1” was dropped: the what-if puts 1 worker at +4 % (under 5 %); bound by")
    # The control: with a recommendation the box is the recommendation.
    recs = [{"action": "Raise num_workers to 4", "reason": "r", "expected_gain": "≈ 200 samples/s"}]
    page = render_html(_with(run, verdict=dict(run.verdict, recommendations=recs)), {})
    assert "Do first:</b> Raise num_workers to 4" in page and "No change recommended" not in page


@pytest.mark.parametrize("seconds, shown", [(0.0203, "20 ms"), (0.004, "4.0 ms"), (0.65, "0.65 s"), (6.71, "6.7 s")])
def test_window_card_keeps_two_figures(run: RunRecord, seconds: float, shown: str) -> None:
    """A fast loader's 20-step window lasts 20 ms: the card says so, not "0.0 s"."""
    assert key_figures(_with(run, window=dict(run.window, seconds=seconds)))[3].value == shown


def test_compare_of_one_scripts_runs_names_its_loaders_change(run: RunRecord, tmp_path: Path) -> None:
    """Two runs of one script (--override-workers 0, then 2): a script's config has no workers, its loader's facts
    do. The page's "what changed" card says "workers 0 → 2", the Runs table shows the loader's figures (no empty
    or None cells), and the story is not said twice (the h1 is its first sentence)."""
    from profiler.analysis.compare import compare
    from profiler.analysis.headline import compare_headline
    from profiler.render import write_compare

    def script(workers: int) -> RunRecord:
        job = {"kind": "script", "target": "/x/train.py", "loader": {"num_workers": workers, "batch_size": 8}}
        return _with(run, job=job, config=dict(run.config, workers=None, batch_size=None, model=None))

    c = compare([script(0), script(2)], names=["w0", "w2"])
    assert [d["text"] for d in c["config_diffs"]["B"]] == ["workers 0 → 2"]
    assert "Differences: workers 0 → 2" in c["sentences"]["B"]
    write_compare(c, tmp_path)
    page = htmllib.unescape((tmp_path / "compare.html").read_text())
    ratio = next(m for m in c["metrics"] if m["key"] == "throughput")["vs_baseline"][1]["ratio"]
    assert "<li><b>workers 0 → 2</b><span>what changed</span></li>" in page and f"<b>{ratio:.2f}x</b>" in page
    runs = page[page.index("<h2>Runs</h2>"):page.index("<h2>Metrics</h2>")]
    cells = [re.sub(r"<[^>]+>", "", x).strip() for x in re.findall(r"<td[^>]*>(.*?)</td>", runs, flags=re.S)]
    assert "None" not in cells and "" not in cells, cells
    assert "train.py" in cells and "0" in cells and "2" in cells
    body = page[page.index("<body>"):]
    assert body.count(compare_headline(c).rstrip(".")) == 1  # the h1; the story below does not repeat it


def test_compare_lead_picture_fits_under_the_answer(run: RunRecord) -> None:
    """The page's lead picture (throughput and stall by cause) is one row: at the page's 1200 px it is under 400 px
    tall, so with the answer and the cards above it (~180 px) it ends on a 768 px screen; compare.png keeps all four
    panels."""
    from profiler.analysis.compare import compare
    from profiler.render.compare_plots import render_png

    c = compare([run, copy.deepcopy(run)])
    with Image.open(io.BytesIO(render_png(c, part="lead"))) as lead, \
            Image.open(io.BytesIO(render_png(c))) as full:
        assert lead.height * 1200 / lead.width < 400
        assert full.height > 1.8 * lead.height


def test_ranks_and_attach_headlines_stay_short(run: RunRecord) -> None:
    """A cpu straggler's headline names "CPU work", not vocab's bracketed list (24 words before); the same for the
    attach headline's cause."""
    from profiler.analysis.headline import attach_headline

    v = {"present": [0, 1], "skew_ms": {"mean": 3.0}, "slow_hosts": [],
         "stragglers": [{"rank": 1, "kind": "input", "cause": "cpu", "waiting_share": 0.73}]}
    assert ranks_headline(v) == "Rank 1 straggles, input-bound on CPU work: the others waited 73 % of each step for it."
    att = _with(run, verdict={"bottleneck": "cpu"}, stall=dict(run.stall, fraction=0.97, fraction_low=0.95,
                                                                fraction_high=0.99))
    words = attach_headline(att)
    assert words.endswith("mostly CPU work.") and len(words.split()) <= HEADLINE_WORDS_MAX


def test_the_lead_chart_says_when_the_headline_cause_is_the_kernels(run: RunRecord) -> None:
    """A dataset that reads its files in plain __getitem__ code: the step chart shows "your __getitem__", the
    headline (from the kernel's view: blocked on the device) says storage reads; a line under the chart reconciles
    them. Where the chart's stage is the cause itself (a timed read stage), no line."""
    stall = dict(run.stall, seconds=1.0, fraction=0.9, by_cause={"io": 0.9, "cpu": 0.1, "transfer": 0.0, "other": 0.0},
                 by_stage={"getitem": 0.95, "collate": 0.05},
                 by_kind={"on_cpu": 0.05, "runqueue": 0.05, "blocked_device": 0.88, "blocked_other": 0.02})
    rec = _with(run, stall=stall, verdict=dict(run.verdict, bottleneck="io", severity="highly input-bound"))
    page = htmllib.unescape(render_html(rec, {"step_time": "not drawn in this test"}))
    assert ("per the kernel, the threads making those batches spent 88 % of the wait blocked on storage reads"
            in page), page[page.index('id="answer"'):][:3000]
    timed = _with(rec, stall=dict(stall, by_stage={"read": 0.95, "collate": 0.05}))
    assert "per the kernel" not in htmllib.unescape(render_html(timed, {"step_time": "not drawn in this test"}))


def _card_ok(value: str) -> bool:
    return value.strip() not in ("", "?", "None", "none", "nan") and "none" not in value.split() and "?" not in value


def test_ranks_and_attach_pages_have_cards_that_read_as_figures(run: RunRecord) -> None:
    """The ranks page (a torchrun job's report.html) and an attach record's report.html lead with 3-5 cards like a
    run's page: no card reads none / ? on a straggler, on no straggler, or on an attach record."""
    from profiler.analysis.headline import attach_figures, ranks_figures

    ranks = [{"rank": 0, "samples_per_s": 100.0}, {"rank": 1, "samples_per_s": 99.5}]
    base = {"world_size": 2, "present": [0, 1], "missing": [], "skew_ms": {"mean": 4.7, "max": 16.6}, "ranks": ranks,
            "slow_hosts": [], "stragglers": []}
    slow = dict(base, stragglers=[{"rank": 1, "kind": "input", "cause": "cpu", "waiting_share": 0.73}])
    for view in (base, slow):
        figs = ranks_figures(view)
        assert 3 <= len(figs) <= 5 and all(_card_ok(f.value) for f in figs), figs
    assert [f.value for f in ranks_figures(slow)] == ["2 of 2", "rank 1", "73 %", "4.7 ms", "199.5 samples/s"]
    assert ranks_figures(base)[1].value == "no straggler"
    att = _with(run, verdict={"bottleneck": "cpu"},
                stall=dict(run.stall, fraction=0.97, fraction_low=0.95, fraction_high=0.99),
                attach={"seconds": 10.1, "sampler": {"rate_hz": 20, "samples": 2025},
                        "processes": [{"role": "main"}, {"role": "worker"}, {"role": "worker"}]})
    figs = attach_figures(att)
    assert [f.value for f in figs] == ["97 %", "CPU work", "2 workers", "10.1 s"]
    assert figs[0].label == "main thread waiting for batches (95 %: 95 %–99 %)"
    bare = attach_figures(_with(att, verdict={}, attach={}))  # an old or thin record: still figures or "—"
    assert all(_card_ok(f.value) for f in bare), bare


def test_sweep_cards() -> None:
    """sweep.html's cards: the best setting, its rate and the first point's, the prediction error, points done; a
    sweep whose points all failed still reads as figures."""
    from profiler.analysis.headline import sweep_figures

    doc = {"baseline": 0, "best": {"label": "workers=2", "samples_per_s": 36.6}, "median_abs_error": 0.32,
           "points": [{"index": 0, "label": "workers=0", "measured_samples_per_s": 25.0},
                      {"index": 1, "label": "workers=2", "measured_samples_per_s": 36.6}]}
    assert [f.value for f in sweep_figures(doc)] == ["workers=2", "36.6 samples/s", "25.0 samples/s", "32 %", "2 of 2"]
    failed = sweep_figures({"points": [{"index": 0, "label": "workers=0", "failed": "exit 1"}], "best": None})
    assert 1 <= len(failed) <= 5 and all(_card_ok(f.value) for f in failed), failed


def test_a_run_that_measured_no_step_shows_no_made_up_figures(run: RunRecord) -> None:
    """A script that failed in its warm-up: the cards say "—" where nothing was measured (not "0.0 samples/s",
    which reads as a measured figure), the box says why there is no advice, the short view does not claim the device
    never waited."""
    empty = _with(run, window=dict(run.window, steps=0, seconds=0.0), verdict={"bottleneck": "none"},
                  throughput=dict(run.throughput, samples_per_s=0.0, steps=0, samples=0),
                  stall=dict(run.stall, seconds=0.0, fraction=0.0), timeline={"steps": {"step": []}}, partial=True,
                  partial_reason="failed: ValueError")
    assert empty.window_steps == 0
    figs = key_figures(empty)
    assert [f.value for f in figs[:2]] == ["—", "—"] and figs[3].value == "0 steps"
    assert no_change(empty).startswith("no step was measured")
    short = _short(empty)
    assert "never waited" not in short and "Idle: not measured" in short and "0.0 samples/s" not in short


def test_ceilings_say_the_binding_words_once(run: RunRecord) -> None:
    """The ceiling that sets the pace is named short in its row ("cores ← sets the pace"), its how without the long
    words of what binds: the "Bound by cores: ..." line under the what-if table says them once."""
    from profiler.render.whatif_rows import ceiling_rows, headline

    words = "cores: the model and 2 workers share the 0.67 of 2 cores other load left"
    rows = [{"stage": "model", "samples_per_s": 148.1, "basis": "measured", "how": "108 ms per step"},
            {"stage": "cores", "samples_per_s": 61.1, "basis": "derived", "how": f"{words}: 11.1 ms of CPU per sample",
             "words": words}]
    rec = _with(run, ceilings={"samples_per_s": 60.8, "lowest": "cores", "lowest_words": words, "rows": rows})
    assert ceiling_rows(rec)[1] == ("cores ← sets the pace", "61.1", "derived", "11.1 ms of CPU per sample")
    assert ceiling_rows(rec)[0][3] == "108 ms per step"
    assert words not in headline(rec) and headline(rec).endswith("the lowest (cores) sets the pace.")


def test_a_long_script_name_keeps_its_card_one_line(run: RunRecord) -> None:
    """The what-ran card of a script with a 70-character name shows its start and end (28 characters): the card row
    stays one line high and the chart stays on the first screen."""
    name = "my_extremely_long_training_script_name_without_any_breaks_v2_final.py"
    rec = _with(run, job={"kind": "script", "target": f"/home/u/{name}", "loader": {"num_workers": 1}})
    value = key_figures(rec)[4].value
    assert value == "my_extremely_l…s_v2_final.py" and len(value) == 28
    short = _with(run, job={"kind": "script", "target": "/x/train.py", "loader": {"num_workers": 1}})
    assert key_figures(short)[4].value == "train.py"


def test_a_loader_only_run_says_the_loop_ran(run: RunRecord) -> None:
    """--model none: the headline, the device line and the card say the loop ran, not a model."""
    rec = _with(run, config=dict(run.config, model="none"), job={"kind": "builtin"})
    page = htmllib.unescape(render_html(rec, {}))
    assert "No GPU: the loop ran (no model) on the CPU" in page and "the model ran" not in page
    assert key_figures(rec)[4].value == "loader only"

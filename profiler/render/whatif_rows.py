"""The display rows of the "What would help" section: the terminal and the HTML share them, so they can never
disagree on a number, and neither needs matplotlib for them (what_would_help.png is whatif_plot.py). Reads
``rec.ceilings`` and ``rec.whatif`` only.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..record.read import CeilingRowView, CeilingsView, WhatIfView, view

if TYPE_CHECKING:  # annotations only: analysis and renderers take the typed record
    from ..record import RunRecord


def _sps(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def _stage(r: CeilingRowView, c: CeilingsView) -> str:
    """The stage's short name (its long words, e.g. what shares the cores, are the row's "how" and the "Bound by"
    line: said there, not three times)."""
    return r.stage + (" ← sets the pace" if r.stage == c.lowest else "")


def ceiling_rows(rec: RunRecord) -> list[tuple[str, str, str, str]]:
    """(stage, samples/s, measured|derived, how) per ceiling, the lowest marked."""
    c = view(CeilingsView, rec.ceilings)
    return [(_stage(r, c), _sps(r.samples_per_s), str(r.basis), _how(r)) for r in c.row_views]


def _how(r: CeilingRowView) -> str:
    """How a ceiling was found, less the long words of what binds that open it ("cores: the model and 2 workers share
    ...: 11.1 ms of CPU per sample"): the "Bound by" line says them, once."""
    how, words = r.how, r.words or ""
    return how[len(words) + 2:] if words and how.startswith(words + ": ") else how


def estimate(x: float | None, iv: list[float] | None) -> str:
    """"≈ 212 (190–240)": a prediction with its interval, as every view shows it."""
    if x is None:
        return "not predicted"
    return f"≈ {_sps(x)}" + (f" ({_sps(iv[0])}–{_sps(iv[1])})" if iv else "")


def prediction_rows(rec: RunRecord) -> list[tuple[str, str, str, str, str]]:
    """(setting, samples/s with its interval, change, would bind, assumption) per prediction."""
    rows = []
    for p in view(WhatIfView, rec.whatif).prediction_rows:
        rows.append((p.setting + (" (this run)" if p.measured else ""), estimate(p.samples_per_s, p.interval),
                     _change(p.change, p.measured), p.binds_words or str(p.binds), p.assumption))
    return rows


def notices(rec: RunRecord) -> list[str]:
    """Lines said under the predictions: an unsteady baseline (with the command that measures it better), and why a
    job that read no files has no storage rows. Old records (no steadiness section) have none."""
    w = view(WhatIfView, rec.whatif)
    out = []
    st = w.steadiness
    if st.notices:
        out.append("Unsteady baseline — the intervals are widened: " + "; ".join(st.notices) + ". Re-measure: "
                   + str(st.remeasure))
    if w.storage_note:
        note = w.storage_note
        out.append(note[:1].upper() + note[1:] + ".")  # not str.capitalize(): it lowercases the rest ("4 KiB")
    return out


def headline(rec: RunRecord) -> str:
    c, w = view(CeilingsView, rec.ceilings), view(WhatIfView, rec.whatif)
    rows = c.row_views
    if not rows:
        return "No ceilings: this run measured no steps."
    parts = ", ".join(f"{x.stage} {_sps(x.samples_per_s)} ({x.basis})" for x in rows)
    lowest = c.lowest or c.lowest_words  # the short name: its words follow under the table
    now = estimate(c.samples_per_s, w.measured.interval).removeprefix("≈ ")
    return f"This run: {now} samples/s; alone, {parts} — the lowest ({lowest}) sets the pace."


def _change(ch: float | None, measured: bool) -> str:
    if ch is None or measured:
        return "—"
    return "±0 %" if abs(ch) < 0.005 else f"{ch * 100:+.0f} %"




def table_rows(rec: RunRecord) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, str]]]:
    """The predictions as the page and the terminal show them: each row with a short binding label (at most ~30
    characters, analysis/binds.py ``binds_label``) and the number of its note. The long words are said once, not
    per row (12 rows on the same shared cores read "cores", and the cores are explained once):

    - notes: each distinct assumption once, with the settings it is for (n, settings, text);
    - bounds: each binding label once, in the full words of the measured row where it binds, else of its first
      row (label, words).

    A row: setting, sps, change, label, words (its own long phrase, for a tooltip), note (1-based)."""
    from ..analysis.binds import binds_label

    rows: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    index: dict[str, int] = {}
    bounds: dict[str, str] = {}
    for p in view(WhatIfView, rec.whatif).prediction_rows:
        setting = p.setting + (" (this run)" if p.measured else "")
        words = p.binds_words or str(p.binds)
        label = binds_label(str(p.binds))
        if label not in bounds or p.measured:
            bounds[label] = words.removeprefix(label + ": ")
        text = p.assumption
        if text not in index:
            index[text] = len(notes) + 1
            notes.append({"n": index[text], "settings": [], "text": text})
        notes[index[text] - 1]["settings"].append(setting)
        rows.append({"setting": setting, "sps": estimate(p.samples_per_s, p.interval),
                     "change": _change(p.change, p.measured), "label": label, "words": words, "note": index[text]})
    return rows, notes, [{"label": k, "words": v} for k, v in bounds.items()]

"""The run record: typed schema, validation on load, v1 migration, bounded reads, atomic save, and the doc."""
from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

import pytest
from _records import record_v1, record_v2

from profiler import fsutil
from profiler.cli import main
from profiler.errors import UserError
from profiler.record import SCHEMA_VERSION, RunRecord, load, schema
from profiler.record.validate import validate

DOC = Path(__file__).resolve().parents[1] / "docs" / "run_json.md"


def _write(tmp_path: Path, d, name="run.json", **kw) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(d, **kw))
    return p


def _error(tmp_path: Path, d) -> str:
    with pytest.raises(UserError) as e:
        load(_write(tmp_path, d))
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_schema_version_is_2_and_a_saved_record_round_trips(tmp_path):
    assert SCHEMA_VERSION == 2
    d = record_v2()
    d["from_a_newer_writer"] = {"kept": [1, 2]}
    d["timeline"]["steps"]["future_column"] = [1.5] * len(d["timeline"]["steps"]["step"])
    rec = load(_write(tmp_path, d))
    assert rec.extra == {"from_a_newer_writer": {"kept": [1, 2]}}
    out = rec.save(tmp_path / "again.json")
    back = json.loads(out.read_text())
    assert back["from_a_newer_writer"] == {"kept": [1, 2]} and "extra" not in back
    assert back["timeline"] == d["timeline"] and back["job"] == d["job"]
    assert load(out).extra == rec.extra


def test_v1_record_migrates_to_v2_columns(tmp_path):
    v1 = record_v1()
    rec = load(_write(tmp_path, v1))
    assert rec.schema_version == 2 and rec.job is None
    tl, sp1 = rec.timeline, v1["timeline"]["sample_spans"]
    sp = tl["sample_spans"]
    assert sp["start"] == sp1["read_start"] and sp["end"] == sp1["augment_end"]
    assert sp["stages"]["decode"] == [round(b - a, 6) for a, b in zip(sp1["read_end"], sp1["decode_end"])]
    n = len(sp1["batch"])
    assert sp["items"] == [1] * n and sp["cpu"] == sp["runq"] == [0.0] * n and sp["rchar"] == [0] * n
    n_steps = len(tl["steps"]["step"])
    assert tl["steps"]["epoch"] == [0] * n_steps and tl["steps"]["main_cpu"] == [0.0] * n_steps
    assert tl["batches"]["sent"] == tl["batches"]["collate_end"]
    assert tl["batches"]["collate_cpu"] == [0.0] * len(tl["batches"]["batch"])
    assert tl["epochs"] == {"epoch": [], "iter_start": [], "iter_end": [], "first_batch": []}
    assert tl["accounting"]["runqueue"] is False and tl["accounting"]["absent"]
    # The migrated record is itself a valid v2 record, and v1's own columns survive for older readers.
    validate(rec.to_dict())
    assert sp["read_start"] == sp1["read_start"]


@pytest.mark.parametrize("damage, field, problem", [
    (lambda d: d["timeline"]["steps"]["wait_end"].__setitem__(3, float("nan")), "timeline.steps.wait_end[3]",
     "is NaN"),
    (lambda d: d["timeline"]["steps"]["wait_end"].__setitem__(3, "NaN"), "timeline.steps.wait_end[3]",
     "is the string 'NaN'"),
    (lambda d: d["timeline"]["steps"]["idle"].__setitem__(0, -0.5), "timeline.steps.idle[0]", "is negative"),
    (lambda d: d["timeline"]["steps"]["samples"].__setitem__(1, 2.5), "timeline.steps.samples[1]",
     "expected an integer"),
    (lambda d: d["timeline"]["steps"]["measured"].__setitem__(1, 1), "timeline.steps.measured[1]",
     "expected true or false"),
    (lambda d: d["timeline"]["batches"]["received"].pop(), "timeline.batches.received", "has 9 rows"),
    (lambda d: d["timeline"]["sample_spans"]["stages"]["decode"].pop(), "timeline.sample_spans.stages.decode",
     "rows"),
    (lambda d: d["timeline"]["batches"]["collate_end"].__setitem__(0, d["timeline"]["batches"]["collate_start"][0]
                                                                   - 0.001),
     "timeline.batches.collate_end[0]", "is before collate_start[0]"),
    (lambda d: d["timeline"]["steps"].__delitem__("epoch"), "timeline.steps.epoch", "is missing"),
    (lambda d: d["window"].__setitem__("end_s", d["window"]["start_s"] - 1), "window.end_s", "is before start_s"),
    (lambda d: d["config"].__setitem__("workers", True), "config.workers", "expected an integer"),
    (lambda d: d["config"].__setitem__("batch_size", 10 ** 30), "config.batch_size", "out of range"),
    (lambda d: d["samples"]["processes"][1].__setitem__("rss_bytes", [1]), "samples.processes[1].rss_bytes",
     "entries"),
    (lambda d: d["skipped"]["files"].__setitem__(0, []), "skipped.files[0]", "expected an object"),
    (lambda d: d["job"]["loader"].__setitem__("num_workers", "3"), "job.loader.num_workers", "a string"),
    (lambda d: d["environment"]["os"].__setitem__("x", float("inf")), "environment.os.x", "is infinite"),
])
def test_first_bad_field_is_named_in_one_line(damage, field, problem):
    d = record_v2()
    damage(d)
    with pytest.raises(UserError) as e:
        RunRecord.from_dict(d)
    msg = str(e.value)
    assert "\n" not in msg and f"'{field}'" in msg and problem in msg, msg


def test_nan_and_overflowing_literals_in_the_file_are_rejected(tmp_path):
    d = record_v2()
    d["timeline"]["steps"]["idle"][2] = float("nan")
    with pytest.raises(UserError, match="NaN is not a number JSON allows"):
        load(_write(tmp_path, d, allow_nan=True))
    d["timeline"]["steps"]["idle"][2] = 12345.678
    p = tmp_path / "inf.json"
    p.write_text(json.dumps(d).replace("12345.678", "1e999"))  # a literal that parses to infinity
    with pytest.raises(UserError, match=r"'timeline.steps.idle\[2\]' is infinite"):
        load(p)


def test_malformed_derived_sections_are_dropped_not_fatal(tmp_path):
    d = record_v2()
    d["stall"] = {"seconds": "lots"}
    d["findings"] = [{"kind": 3}]
    d["verdict"] = {"summary": "kept", "cause_share": 0.5}
    rec = load(_write(tmp_path, d))
    assert rec.stall == {} and rec.findings == [] and rec.verdict["summary"] == "kept"


@pytest.mark.parametrize("content, expected", [
    (b"\xff\xfe{}", "not UTF-8 text (byte 0xff at offset 0)"),
    (b'{"schema_version": 2, "x": "\xc3\x28"}', "not UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
    (b"[1, 2]", "top level is not a JSON object"),
    (b'{"schema_version": 9}', "schema_version 9 is not supported"),
    (b'{"schema_version": "2"}', "schema_version '2' is not supported"),
    (b'{"schema_version": 2, "partial": false}', "'config' is missing"),
], ids=["bom", "bad-utf8", "deep", "array", "version-9", "version-str", "no-config"])
def test_unreadable_files_are_one_line_user_errors(tmp_path, content, expected):
    p = tmp_path / "run.json"
    p.write_bytes(content)
    with pytest.raises(UserError) as e:
        load(p)
    assert expected in str(e.value) and "\n" not in str(e.value)


def test_special_files_are_refused_before_reading(tmp_path):
    with pytest.raises(UserError, match="not a regular file"):
        load("/dev/zero")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="not a regular file"):
        load(fifo)  # would block forever if opened for reading
    with pytest.raises(UserError, match="no such file"):
        load(tmp_path / "missing.json")
    (tmp_path / "d").mkdir()
    with pytest.raises(UserError, match="no such file"):
        load(tmp_path / "d")  # a folder without run.json


def test_oversized_file_is_refused_by_its_size(tmp_path, monkeypatch):
    from profiler import record

    p = _write(tmp_path, record_v2())
    monkeypatch.setattr(record, "MAX_RECORD_BYTES", p.stat().st_size - 1)
    with pytest.raises(UserError, match="larger than any run record"):
        load(p)


def test_cli_report_of_a_damaged_record_exits_2_with_one_line(tmp_path, capsys):
    d = record_v2()
    d["timeline"]["steps"]["wait_end"][3] = "oops"
    p = _write(tmp_path, d)
    assert main(["report", str(p), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "timeline.steps.wait_end[3]" in err and "Traceback" not in err
    assert main(["report", "/dev/zero"]) == 2


def test_save_writes_nan_as_null_and_numpy_as_numbers(tmp_path):
    import numpy as np

    rec = RunRecord.from_dict(record_v2())
    rec.throughput = {"samples_per_s": float("nan"), "steps": np.int64(3), "window_s": np.float32(1.5)}
    back = json.loads(rec.save(tmp_path / "run.json").read_text())
    assert back["throughput"] == {"samples_per_s": None, "steps": 3, "window_s": 1.5}
    assert [f.name for f in tmp_path.iterdir()] == ["run.json"]


def test_atomic_write_leaves_old_file_and_no_temporary_on_enospc(tmp_path, monkeypatch):
    target = tmp_path / "run.json"
    target.write_text("old")
    real_write = os.fdopen

    class Full:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def write(self, b):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fsutil.os, "fdopen", lambda fd, mode: Full(real_write(fd, mode)))
    with pytest.raises(OSError) as e:
        fsutil.atomic_write_text(target, "new" * 1000)
    assert e.value.errno == errno.ENOSPC and str(target) in str(e.value) and "No space left" in str(e.value)
    assert target.read_text() == "old" and [f.name for f in tmp_path.iterdir()] == ["run.json"]
    monkeypatch.undo()
    with pytest.raises(OSError, match="could not write"):
        fsutil.atomic_write_bytes(tmp_path / "no" / "dir" / "x", b"1")
    fsutil.atomic_write_text(target, "new", fsync=True)
    assert target.read_text() == "new" and [f.name for f in tmp_path.iterdir()] == ["run.json"]


def test_enospc_on_a_real_full_filesystem(tmp_path):
    """A real full disk where the host lets us mount a tiny tmpfs (root); skipped elsewhere."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or os.system(f"mount -t tmpfs -o size=64k tmpfs {mnt} 2>/dev/null") != 0:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        rec = RunRecord.from_dict(record_v2())
        rec.extra["padding"] = "x" * 200_000  # more than the 64 KiB the filesystem holds
        with pytest.raises(OSError) as e:
            rec.save(mnt / "run.json")
        assert e.value.errno == errno.ENOSPC and list(mnt.iterdir()) == []
    finally:
        os.system(f"umount {mnt}")


def _schema_fields() -> set[str]:
    names: set[str] = set()
    for obj in vars(schema).values():
        if isinstance(obj, type) and schema.is_typeddict(obj):  # schema's: typing_extensions' on 3.10
            names |= set(schema.get_type_hints(obj))
    return names


def test_doc_names_every_field_of_the_schema():
    doc = DOC.read_text()
    missing = sorted(n for n in _schema_fields() if not re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", doc))
    assert not missing, f"docs/run_json.md does not document: {', '.join(missing)}"
    assert "schema_version 2" in doc

"""``python -m profiler attach PID [--duration S] [--rate HZ] [--out DIR] [--rank-of]``: diagnose a running job from
outside, with no restart and nothing injected (profiler/attach/), then write run.json (``job.kind = "attach"``),
the attach report files and the terminal summary.

Exit status: 0; 2 bad input or a PID that cannot be attached to (one line: no such process, not Python, no torch,
permission refused with how to grant it), also when the window saw no DataLoader activity (the record is still
written, its verdict ``none``); 128+N when interrupted by signal N (the record of what was sampled is written first,
marked partial).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..config import (
    MAX_ATTACH_DURATION_S,
    MAX_ATTACH_RATE_HZ,
    MIN_ATTACH_DURATION_S,
    MIN_ATTACH_RATE_HZ,
    AttachConfig,
)
from ..errors import UserError

D = AttachConfig()

EPILOG = f"""examples:
  python -m profiler attach 41237                        # {D.duration_s:g} s; Ctrl-C stops early and still reports
  python -m profiler attach 41237 --duration 120 --out reports/live
  python -m profiler attach --rank-of 41237              # every rank of the torchrun job PID belongs to
  python -m profiler report reports/live/run.json        # and compare, like any other run

Needs permission to read the job's memory (what ptrace checks): root or CAP_SYS_PTRACE, or the job's own user when
kernel.yama.ptrace_scope is 0 (at 1 only a parent may read its child; 2 needs CAP_SYS_PTRACE; 3 forbids it). The job
is never stopped, signalled or changed; nothing is left running in it or beside it when attach exits.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.usage = "python -m profiler attach PID [--duration S] [--rate HZ] [--out DIR] | attach --rank-of PID"
    p.epilog = EPILOG
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("pid", metavar="PID", type=int, nargs="?", help="the job's main process (or one of its "
                   "DataLoader workers: its parent is taken)")
    p.add_argument("--rank-of", metavar="PID", type=int, help="attach to every rank of the torchrun job PID belongs "
                   "to (one record per rank, in <out>/attach-rank<k>/; merged: <out>/ranks.json, report.html)")
    p.add_argument("--duration", type=float, default=D.duration_s, metavar="S",
                   help=f"seconds to sample (default {D.duration_s:g}; Ctrl-C ends it early and still reports)")
    p.add_argument("--rate", type=int, default=D.rate_hz, metavar="HZ",
                   help=f"stack samples per second per thread (default {D.rate_hz})")
    p.add_argument("--out", metavar="DIR", help="output folder (default reports/<time>_attach_<pid>/)")
    p.add_argument("--no-plots", action="store_true", help="write run.json and the terminal summary only")


def _check(args: argparse.Namespace) -> list[int]:
    if (args.pid is None) == (args.rank_of is None):
        raise UserError("attach needs one PID: attach PID, or attach --rank-of PID")
    if not MIN_ATTACH_DURATION_S <= args.duration <= MAX_ATTACH_DURATION_S:
        raise UserError(f"--duration {args.duration:g}: must be {MIN_ATTACH_DURATION_S:g} to "
                        f"{MAX_ATTACH_DURATION_S:g} seconds")
    if not MIN_ATTACH_RATE_HZ <= args.rate <= MAX_ATTACH_RATE_HZ:
        raise UserError(f"--rate {args.rate}: must be {MIN_ATTACH_RATE_HZ} to {MAX_ATTACH_RATE_HZ} per second")
    if args.rank_of is not None:
        from ..attach import discover

        return discover.ranks_of(args.rank_of)
    return [args.pid]


def main(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .. import signals
    from ..attach import discover, pyspy, session
    from ..outdir import claim, create_run_dir, discard_if_empty, prepare_out
    from ..render.attach_terminal import print_found

    pids = _check(args)
    console = Console(stderr=False)
    binary = pyspy.find_binary()
    # claimed first, as run, report, sweep and the API claim theirs: two attaches (or an attach and a run) into one
    # --out both said "Wrote" and one record replaced the other; now the second is one line, exit 2, before sampling
    out = claim(prepare_out(args.out)) if args.out else None
    try:
        targets = [discover.find(pid, binary) for pid in pids]
        for t in targets:
            print_found(t, console, args.duration, args.rate)
        if out is None:
            out = create_run_dir("reports", f"{_dt.datetime.now():%Y%m%d-%H%M%S}_attach_{targets[0].pid}")
        sampled = session.sample(targets, binary, args.duration, args.rate)
    except BaseException:  # a PID that cannot be attached to, py-spy refusing, Ctrl-C before anything was sampled
        if out is not None:
            discard_if_empty(out)
        raise
    # From the window's end, signals are held (session.sample: signals.job_ended): the first one is raised when
    # everything is written, a later one only says so; two Ctrl-C 0.1 s apart, or one as the window ended, once
    # cost the whole record ("interrupted before anything was measured")
    interrupted = next((s.interrupted for s in sampled if s.interrupted is not None), None)
    status = 0
    written: list[bool] = []
    late: KeyboardInterrupt | None = None
    try:
        with signals.deferred():
            status = _write_all(args, out, sampled, console, written)
    except KeyboardInterrupt as e:
        if not written:
            raise  # forced (the third signal) before the first record was saved
        late = e
    if interrupted is not None:
        return signals.exit_status(interrupted)
    if late is not None:
        print(f"profiler: {signals.describe(signals.signal_number(late) or 2)} received while saving; everything "
              f"sampled is in {out}", file=sys.stderr)
        return signals.exit_status(late)
    return status


def _write_all(args: argparse.Namespace, out: Path, sampled: list[Any], console: Any, written: list[bool]) -> int:
    """Each target's record (and, for ranks, the merged view); appends to ``written`` once a record is saved. The
    record goes where ``run``'s goes when its folder cannot be written (a full disk): the temp folder, said in one
    line (profiler/saving.py); the report files are then skipped, with one line."""
    from ..analysis import analyze
    from ..attach import build
    from ..outdir import prepare_out
    from ..render import write_attach
    from ..render.attach_terminal import print_attach

    status = 0
    by_rank: dict[int, dict[str, object]] = {}
    paths: dict[int, str] = {}
    for i, s in enumerate(sampled):
        folder = out
        if len(sampled) > 1:
            try:
                folder = prepare_out(out / f"attach-rank{_rank(s, i)}")
            except UserError as e:
                folder = Path(tempfile.mkdtemp(prefix=f"profiler-attach-rank{_rank(s, i)}-"))
                print(f"profiler: {e}; rank {_rank(s, i)}'s record goes to {folder}", file=sys.stderr)
        rec = build.build(s)
        tag = f"rank{_rank(s, i)}-" if len(sampled) > 1 else ""
        path = _save(rec, folder / "run.json", tag)  # the raw record first: analysis or drawing failing must not
        written.append(True)                         # cost it
        rec = analyze(rec)
        path = _save(rec, path, tag)
        files: list[Path] = [path]
        if not args.no_plots and path.parent == folder:
            try:
                files += write_attach(rec, folder)
            except OSError as e:
                print(f"profiler: could not write the report files in {folder} ({e.strerror or e}); run.json is "
                      "saved", file=sys.stderr)
        print_attach(rec, console, [str(f) for f in files])
        by_rank[_rank(s, i)] = rec.to_dict()
        paths[_rank(s, i)] = str(path.resolve())
        if rec.verdict.get("bottleneck") == "none" and not rec.partial:
            print(f"profiler: error: no DataLoader activity seen in process {s.target.pid} {_what_was_seen(rec)} "
                  f"(record: {path})", file=sys.stderr)
            status = 2
    if len(sampled) > 1:  # --rank-of: one ranks table over the ranks' records, the straggler named
        try:
            write_ranks_view(out, by_rank, paths, console, plots=not args.no_plots)
        except OSError as e:
            print(f"profiler: could not write the merged ranks view in {out} ({e.strerror or e}); each rank's "
                  "record is saved", file=sys.stderr)
    return status


def _what_was_seen(rec: Any) -> str:
    """What the quiet window did see, so that "no DataLoader activity" can be told from a sampler that saw little:
    the window, the main thread's samples (none in a loader's next) and the workers' time on a core."""
    a = rec.attach or {}
    stall = rec.stall or {}
    workers = [t for t in a.get("threads") or [] if t.get("role") == "worker"]
    on_cpu = sum(float(t.get("on_cpu_s") or 0.0) for t in workers)
    return (f"in {float(a.get('seconds') or 0.0):.1f} s: {int(stall.get('main_samples') or 0)} main-thread samples, "
            f"{int(stall.get('wait_samples') or 0)} waiting for a batch; {len(workers)} worker thread"
            f"{'s' if len(workers) != 1 else ''} {on_cpu:.3f} s on a core")


def _save(rec: Any, path: Path, tag: str) -> Path:
    """``saving.save_record`` with a fallback name of its own per rank (``tag``): that one's name is per process,
    and ``--rank-of`` saves one record per rank from one process (on a full disk the second replaced the first)."""
    from ..saving import save_record

    return save_record(rec, path, f"attach-{tag}" if tag else "")


def write_ranks_view(out: Path, by_rank: dict[int, dict[str, object]], paths: dict[int, str], console: object,
                     plots: bool = True) -> list[Path]:
    """The merged view of the ranks' attach records (profiler/attach/ranks.py) through a torchrun job's own
    renderers: <out>/ranks.json, ranks.png (``plots``) and report.html, each rank's page linked; no merged trace
    (attach times no spans). Then its table in the terminal."""
    from ..attach.ranks import merged
    from ..render import RANKS, render_all
    from ..render.attach_terminal import print_attach_ranks

    view = merged(by_rank, paths)
    chosen = tuple(r for r in RANKS if r.name != "ranks_trace" and (plots or r.name != "ranks_png"))
    files = render_all(chosen, view, out, {"recs": {}})
    print_attach_ranks(view, console, [str(f) for f in files])
    return files


def _rank(s: object, i: int) -> int:
    ranks = getattr(getattr(s, "target", None), "ranks", {}) or {}
    try:
        return int(ranks.get("RANK", i))
    except ValueError:
        return i



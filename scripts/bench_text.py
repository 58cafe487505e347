"""Are the text transforms on user strings linear? Redaction, terminal/markup/matplotlib escaping, the argv shown.

(rich's default highlighter is not: 60,000 characters took 19 s, so the line that shows a script's arguments is
printed without it; ``shown_line`` below is that line.)

Each transform runs on strings of 0.5 MB and 1 MB built to defeat it (one long word, a long base64-like run, many
``scheme://`` prefixes without credentials, token prefixes repeated, control characters, rich markup brackets) and on
a plain 1 MB log-like text. A linear transform takes about twice as long on twice the input; a quadratic one four
times. Prints one line per transform and input, then, last, ``text_transform_worst_s_per_mb: X``: the slowest
transform's seconds on 1 MB. Budget: 1 s per MB (a 60,000-character script argument then costs milliseconds; before,
the redaction took 4.7 s on 40,000 characters). CPU time (getrusage), so other load on the host matters less.

    PYTHONPATH=$PWD python scripts/bench_text.py
"""
from __future__ import annotations

import resource
import sys
from collections.abc import Callable

MB = 1_000_000
BUDGET_S_PER_MB = 1.0


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _inputs(n: int) -> dict[str, str]:
    def rep(unit: str) -> str:
        return (unit * (n // len(unit) + 1))[:n]

    return {"one word": rep("a"), "base64 run": rep("aB3"), "schemes": rep("http://a:"), "token prefixes": rep("sk-"),
            "hyphens": rep("a-"), "controls": rep("a\x1b[0m"), "brackets": rep("[b]x[/b]"),
            "log text": rep("epoch 3 step 120 loss 0.42 path /data/imgs/n0142/img_00017.jpg "),
            "credentials": rep("s3://id:secret@bucket/k ")}


def _transforms() -> dict[str, Callable[[str], object]]:
    import io

    from rich.console import Console

    from profiler.redact import redact_argv, redact_text, redact_value
    from profiler.render.units import markup, mpl, printable

    console = Console(file=io.StringIO(), width=100)

    def shown_line(s: str) -> None:  # the "Profiling SCRIPT ARGS" line of `run`, as commands/run.py prints it
        console.print("Profiling job.py " + " ".join(redact_argv([s])), markup=False, highlight=False)

    return {"shown_line": shown_line, "redact_text": redact_text, "redact_argv": lambda s: redact_argv(["--x", s, s]),
            "redact_value": lambda s: redact_value({"a": [s]}), "printable": printable, "markup": markup, "mpl": mpl}


def main() -> int:
    worst = 0.0
    for tname, fn in _transforms().items():
        small, big = _inputs(MB // 2), _inputs(MB)
        for iname in big:
            t0 = _cpu()
            fn(small[iname])
            t1 = _cpu()
            fn(big[iname])
            t2 = _cpu()
            s_half, s_full = t1 - t0, t2 - t1
            ratio = s_full / s_half if s_half > 1e-3 else float("nan")
            worst = max(worst, s_full)
            print(f"{tname:13s} {iname:15s} 0.5 MB {s_half:7.3f} s  1 MB {s_full:7.3f} s  ratio {ratio:5.2f}")
    print(f"budget {BUDGET_S_PER_MB} s per MB: {'within' if worst <= BUDGET_S_PER_MB else 'OVER'}", file=sys.stderr)
    print(f"text_transform_worst_s_per_mb: {worst:.3f}")
    return 0 if worst <= BUDGET_S_PER_MB else 1


if __name__ == "__main__":
    sys.exit(main())

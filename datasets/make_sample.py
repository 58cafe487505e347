"""Make a synthetic JPEG dataset (the same generator as the built-in sample) anywhere.

    python datasets/make_sample.py OUT_DIR [--count 1200] [--classes 10] [--size 500x375] [--seed 0]

Generated data stays out of git (see .gitignore).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiler.harness.data import SAMPLE_CLASSES, SAMPLE_COUNT, make_sample_dataset  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--count", type=int, default=SAMPLE_COUNT)
    p.add_argument("--classes", type=int, default=SAMPLE_CLASSES)
    p.add_argument("--size", default="500x375", help="WIDTHxHEIGHT")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    w, h = (int(x) for x in a.size.lower().split("x"))
    make_sample_dataset(a.out, a.count, a.classes, (w, h), a.seed)
    print(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

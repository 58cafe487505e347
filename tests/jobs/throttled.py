"""Run a command under the kernel's block-I/O throttle: argv data_dir rate command...; the command's processes
inherit the cgroup (what `run --throttle` does to a script), so a job started here reads slowly from outside too."""
import subprocess
import sys

from profiler.storage import device as sdev
from profiler.storage import throttle as thr

if __name__ == "__main__":
    spec = thr.parse_throttle(sys.argv[2])
    with thr.KernelThrottle(spec, sdev.describe_storage(sys.argv[1]).maj_min):
        p = subprocess.Popen(sys.argv[3:])
        try:
            sys.exit(p.wait())
        except KeyboardInterrupt:
            p.terminate()
            p.wait()

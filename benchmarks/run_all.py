"""``make bench``: every benchmark at a size that fits a 2-core machine, one after another.

Each script prints its own table; this runner only chooses the sizes. Issue 6 will gather
the figures into one table (``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = [
    ["record_index.py", "--keys", "10000000"],
    ["upsert.py", "--rows", "1000000"],
]


def main() -> int:
    for script, *args in RUNS:
        print(f"== {script} {' '.join(args)}", flush=True)
        done = subprocess.run([sys.executable, str(HERE / script), *args], check=False)
        if done.returncode:
            return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())

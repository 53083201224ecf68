"""Run every benchmark in turn and print its figures (`make bench`). Results: benchmarks/results/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = ["bench_ingest.py", "bench_retrieval.py", "bench_generation.py", "bench_scoring.py"]

if __name__ == "__main__":
    failed = []
    for b in (sys.argv[1:] or BENCHES):
        print(f"\n### {b}", flush=True)
        if subprocess.run([sys.executable, str(HERE / b)], cwd=HERE).returncode != 0:
            failed.append(b)
    if failed:
        print(f"failed: {', '.join(failed)}")
        sys.exit(1)

"""Run every benchmark in turn and print its figures and targets (`make bench`). Results: benchmarks/results/.

Exits 1 when a benchmark crashed, missed a target (its MISS lines say which) or was skipped.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = ["bench_ingest.py", "bench_retrieval.py", "bench_generation.py", "bench_scoring.py", "bench_calibrate.py",
           "bench_serve.py"]

if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from common import EXIT_SKIPPED, EXIT_TARGET_MISSED

    outcome: dict[str, list[str]] = {"crashed": [], "missed a target": [], "skipped (no ../shared)": []}
    for b in (sys.argv[1:] or BENCHES):
        print(f"\n### {b}", flush=True)
        code = subprocess.run([sys.executable, str(HERE / b)], cwd=HERE).returncode
        if code == EXIT_TARGET_MISSED:
            outcome["missed a target"].append(b)
        elif code == EXIT_SKIPPED:
            outcome["skipped (no ../shared)"].append(b)
        elif code != 0:
            outcome["crashed"].append(b)
    bad = {k: v for k, v in outcome.items() if v}
    for what, names in bad.items():
        print(f"{what}: {', '.join(names)}")
    sys.exit(1 if bad else 0)

"""benchmarks/run_all.py (`make bench`): its exit status, as README describes it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_run_all_fails_when_a_benchmark_misses_crashes_or_is_skipped(tmp_path):
    # README: make bench exits 1 when a target is missed, a benchmark crashed or was skipped
    # for want of ../shared; 0 only when every one ran and met its targets.
    bench = tmp_path / "benchmarks"
    bench.mkdir()
    for name in ("run_all.py", "common.py"):
        shutil.copy(REPO / "benchmarks" / name, bench / name)
    exits = {"ok.py": "0", "missed.py": "common.EXIT_TARGET_MISSED", "skipped.py": "common.EXIT_SKIPPED",
             "crashed.py": "1"}
    for name, code in exits.items():
        (bench / name).write_text(f"import sys\nimport common\nsys.exit({code})\n")

    def run_all(*benches):
        return subprocess.run([sys.executable, str(bench / "run_all.py"), *benches], capture_output=True, text=True,
                              timeout=60)

    assert run_all("ok.py").returncode == 0
    for name, said in (("missed.py", "missed a target: missed.py"), ("skipped.py", "skipped (no ../shared): skipped.py"),
                       ("crashed.py", "crashed: crashed.py")):
        r = run_all("ok.py", name)
        assert r.returncode == 1 and said in r.stdout, (name, r.stdout)

"""Cost of the ray_adapter.pth line when RAY_BACKEND is unset, of interpreter start with it unset,
set, or set to a value the adapter does not know, and of `import ray` through the hook. Prints one JSON object (times in microseconds / milliseconds)."""
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

LINE = (Path(__file__).resolve().parents[1] / "hooks" / "ray_adapter.pth").read_text().strip()


def pth_line_us(n=20000):
    env_backup = os.environ.pop("RAY_BACKEND", None)
    code = compile(LINE, "ray_adapter.pth", "exec")
    try:
        samples = []
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(n):
                exec(code, {})
            samples.append((time.perf_counter() - t) / n)
    finally:
        if env_backup is not None:
            os.environ["RAY_BACKEND"] = env_backup
    return statistics.median(samples) * 1e6


def import_ray_ms(runs=7):
    env = dict(os.environ, RAY_BACKEND="yuanrong")
    code = "import time; t = time.perf_counter(); import ray; print(time.perf_counter() - t)"
    out = [float(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                text=True, check=True).stdout) for _ in range(runs)]
    return statistics.median(out) * 1e3


def interpreter_start_ms(backend, runs=7):
    """``backend``: None (unset), or the RAY_BACKEND value to start with."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_BACKEND"}
    if backend:
        env["RAY_BACKEND"] = backend
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], env=env, check=True, stderr=subprocess.DEVNULL)
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1e3


if __name__ == "__main__":
    print(json.dumps({
        "pth_line_unset_us": round(pth_line_us(), 3),
        "python_startup_unset_ms": round(interpreter_start_ms(None), 1),
        "python_startup_set_ms": round(interpreter_start_ms("yuanrong"), 1),
        # a value the adapter does not know: one warning on stderr, nothing else imported
        "python_startup_unknown_value_ms": round(interpreter_start_ms("embedded"), 1),
        "import_ray_via_hook_ms": round(import_ray_ms(), 1),
    }))

"""Write docs/compat.md from the compat matrix, and ``compat_matrix/compiled.json`` (the
backends and options the runtime checks, as JSON): ``python tools/gen_compat_doc.py``.

``tests/test_report.py`` and ``tests/test_matrix.py`` fail when the files differ from what this
writes, so run it after changing any ``src/ray_adapter/compat_matrix/*.toml`` (or ``usage.csv``).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "src"))

from ray_adapter import matrix, report  # noqa: E402

if __name__ == "__main__":
    # compiled.json first: the doc renders the matrix as the runtime reads it, from that file
    # (rendered before it, the doc showed the options as they were before the edit).
    compiled = matrix.write_compiled()
    for cached in list(vars(matrix).values()):  # (what was read from the old file, if any)
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()
    target = os.path.join(ROOT, "docs", "compat.md")
    with open(target, "w", encoding="utf-8") as fh:
        fh.write(report.compat_markdown())
    print(f"wrote {os.path.relpath(target, ROOT)}")
    print(f"wrote {os.path.relpath(compiled, ROOT)}")

"""``ray-adapter scan``: which Ray APIs a code base uses, and whether the adapter provides them.

    result = scan(["src/", "notebooks/"], backend="embedded", excludes=["tests/"])
    result.findings       # [Finding]: path, cell, line, column, symbol, status, reason, ...
    result.errors         # [ScanError]: files that could not be read, decoded or parsed
    result.exit_code("gap")

Files are parsed with :mod:`ast`, never imported or run (see :mod:`.files` for which files and
:mod:`.visitor` for what counts as a use); statuses come from the compat matrix through
:mod:`.classify`. Large trees are scanned by a pool of processes (``jobs``).
"""
import ast
import os
from dataclasses import asdict, dataclass, field

from ray_adapter.scan import classify, files, visitor

STATUSES = classify.STATUSES
#: Exit codes of ``ray-adapter scan`` (the highest that applies wins).
EXIT_OK, EXIT_PARTIAL, EXIT_GAP, EXIT_UNPARSED = 0, 1, 2, 3
#: Below this many files a pool of processes costs more than it saves.
_PARALLEL_MIN_FILES = 64


@dataclass(frozen=True)
class Finding:
    """One use of Ray: ``path`` as given, ``cell`` (1-based notebook cell, else None), 1-based
    ``line``/``column`` (characters), the matrix ``symbol`` plus ``detail`` (``="SPREAD"``,
    ``["pip"]``), ``kind``, ``status`` and ``reason``."""

    path: str
    cell: object
    line: int
    column: int
    end_line: int
    end_column: int
    symbol: str
    detail: str
    kind: str
    status: str
    reason: str

    @property
    def display(self):
        return self.symbol + self.detail


@dataclass(frozen=True)
class ScanError:
    """A file (or notebook cell) that could not be read, decoded or parsed."""

    path: str
    cell: object
    line: int
    column: int
    message: str


@dataclass
class ScanResult:
    backend: str
    files: int = 0
    findings: list = field(default_factory=list)
    errors: list = field(default_factory=list)

    def counts(self):
        """``{status: number of findings}`` for every status (zeros included)."""
        out = dict.fromkeys(STATUSES, 0)
        for finding in self.findings:
            out[finding.status] += 1
        return out

    def exit_code(self, fail_on="gap"):
        """3 when a file could not be parsed, else 2 for a gap, else 1 for a partial (or
        unknown) use when ``fail_on == "partial"``, else 0."""
        if fail_on not in ("gap", "partial"):
            raise ValueError(f"fail_on must be 'gap' or 'partial', got {fail_on!r}")
        if self.errors:
            return EXIT_UNPARSED
        counts = self.counts()
        if counts["gap"]:
            return EXIT_GAP
        if fail_on == "partial" and (counts["partial"] or counts["unknown"]):
            return EXIT_PARTIAL
        return EXIT_OK

    def as_dict(self):
        return {"backend": self.backend, "files": self.files,
                "findings": [asdict(f) for f in self.findings],
                "errors": [asdict(e) for e in self.errors]}


_classifiers = {}


def _classifier(backend):
    if backend not in _classifiers:
        _classifiers[backend] = classify.Classifier(backend)
    return _classifiers[backend]


def _parse(text, path, cell):
    try:
        return ast.parse(text, filename=path), None
    except SyntaxError as exc:
        return None, ScanError(path, cell, exc.lineno or 0, exc.offset or 0, f"{type(exc).__name__}: {exc.msg}")
    except (ValueError, MemoryError, RecursionError) as exc:  # null bytes; absurd nesting
        return None, ScanError(path, cell, 0, 0, f"{type(exc).__name__}: {exc}")


def _scan_sources(parts, path, backend):
    """Notebook cells share one namespace, so one walker sees them in order."""
    walker = visitor.RayUses(_classifier(backend), [])
    findings, errors = [], []
    for source in parts:
        tree, error = _parse(source.text, path, source.cell)
        if error is not None:
            errors.append(error)
            continue
        if "ray" not in source.text and not walker.ray:
            continue  # nothing can be bound to Ray without the word (the parse still checks syntax)
        walker.lines, walker.uses = source.text.split("\n"), []
        walker.visit(tree)
        found = [Finding(path, source.cell, u.line, u.column, u.end_line, u.end_column, u.symbol,
                         u.detail, u.kind, u.status, u.reason) for u in walker.uses]
        findings += sorted(found, key=lambda f: (f.line, f.column))
    return findings, errors


def scan_source(text, path="<string>", backend="embedded"):
    """``(findings, errors)`` for one Python source text."""
    return _scan_sources([files.Source(text)], path, backend)


def scan_file(path, backend="embedded"):
    """``(findings, errors)`` for one ``.py`` or ``.ipynb`` file."""
    try:
        parts = files.sources(path)
    except files.SourceError as exc:
        return [], [ScanError(path, None, exc.line, exc.column, str(exc))]
    return _scan_sources(parts, path, backend)


def _scan_many(job):
    paths, backend = job
    out = []
    for path in paths:
        out.append(scan_file(path, backend))
    return out


def scan(paths, backend="embedded", excludes=(), use_gitignore=True, jobs=None):
    """Scan ``paths`` (files or directories) and return a :class:`ScanResult`.

    ``excludes`` are gitignore-style patterns; ``.gitignore`` files are honoured unless
    ``use_gitignore`` is false. ``jobs`` processes parse in parallel (default: the number of
    CPUs, for trees of 64 files or more). A path that does not exist is an error.
    """
    classify.Classifier(backend)  # validates the backend name before any work
    found, missing = files.discover(paths, excludes, use_gitignore)
    result = ScanResult(backend, files=len(found))
    result.errors += [ScanError(p, None, 0, 0, "no such file or directory") for p in missing]
    jobs = jobs or (os.cpu_count() or 1)
    if jobs > 1 and len(found) >= _PARALLEL_MIN_FILES:
        outputs = _parallel(found, backend, jobs)
    else:
        outputs = [scan_file(p, backend) for p in found]
    for findings, errors in outputs:
        result.findings += findings
        result.errors += errors
    return result


def _parallel(paths, backend, jobs):
    import multiprocessing
    import threading
    from concurrent.futures import ProcessPoolExecutor

    from ray_adapter import matrix

    matrix.modules()  # load the matrix once; forked workers inherit it
    matrix.submodule_entries()
    for section in matrix.option_sections():
        matrix.options(section)
    # fork is cheapest (workers inherit the loaded matrix) but unsafe once threads run here.
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() and \
        threading.active_count() == 1 else "spawn"
    context = multiprocessing.get_context(method)
    size = max(1, min(64, len(paths) // (jobs * 4)))
    chunks = [(paths[i:i + size], backend) for i in range(0, len(paths), size)]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        return [item for chunk in pool.map(_scan_many, chunks) for item in chunk]

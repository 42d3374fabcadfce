"""Which files ``ray-adapter scan`` reads, and their Python source.

:func:`discover` expands the paths given on the command line into ``.py`` and ``.ipynb`` files:
directories are walked (sorted, so output is deterministic), skipping version-control and
virtual-environment folders, the patterns of ``--exclude`` and of every ``.gitignore`` found on
the way (gitignore semantics, by :mod:`pathspec`). A file named explicitly is always scanned.

:func:`sources` reads one file into the Python sources to parse: one for a ``.py`` file (its
encoding from the PEP 263 cookie or BOM, UTF-8 by default), one per code cell for a notebook
(IPython magics and shell escapes blanked out so the cell parses). Nothing is imported or run.
"""
import ast
import io
import json
import os
import re
import tokenize
from dataclasses import dataclass

import pathspec

SUFFIXES = (".py", ".ipynb")
#: Folders never walked into: version control, caches, build and environment trees.
SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", ".tox", ".nox", ".mypy_cache",
             ".pytest_cache", ".ruff_cache", "node_modules", ".ipynb_checkpoints", "site-packages"}


class SourceError(Exception):
    """A file that could not be read or decoded; ``line``/``column`` are 1-based (0 = unknown)."""

    def __init__(self, message, line=0, column=0):
        super().__init__(message)
        self.line, self.column = line, column


@dataclass(frozen=True)
class Source:
    """Python text to parse: the whole file (``cell`` None) or one notebook code cell (1-based)."""

    text: str
    cell: object = None


def _is_venv(path):
    return os.path.isfile(os.path.join(path, "pyvenv.cfg"))


def _gitignore(directory):
    path = os.path.join(directory, ".gitignore")
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return pathspec.GitIgnoreSpec.from_lines(fh)
    except OSError:
        return None


def discover(paths, excludes=(), use_gitignore=True):
    """``(files, missing)``: the files to scan under ``paths`` (in order, no duplicates) and the
    paths that do not exist. ``excludes`` are gitignore-style patterns matched against the path
    relative to each directory given."""
    exclude_spec = pathspec.GitIgnoreSpec.from_lines(excludes) if excludes else None
    files, missing, seen = [], [], set()

    def add(path):
        key = os.path.realpath(path)
        if key not in seen:
            seen.add(key)
            files.append(path)

    for root in paths:
        if os.path.isfile(root):
            add(root)
            continue
        if not os.path.isdir(root):
            missing.append(root)
            continue
        # (directory, spec) pairs of the .gitignore files in force, outermost first
        ignores = []
        for current, dirs, names in os.walk(root):
            while ignores and not _within(current, ignores[-1][0]):
                ignores.pop()
            if use_gitignore:
                spec = _gitignore(current)
                if spec is not None:
                    ignores.append((current, spec))
            kept = []
            for d in sorted(dirs):
                full = os.path.join(current, d)
                if d in SKIP_DIRS or _is_venv(full) or _excluded(full + "/", root, exclude_spec, ignores):
                    continue
                kept.append(d)
            dirs[:] = kept
            for name in sorted(names):
                if name.endswith(SUFFIXES):
                    full = os.path.join(current, name)
                    if not _excluded(full, root, exclude_spec, ignores):
                        add(full)
    return files, missing


def _within(path, directory):
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _relative(path, base):
    rel = os.path.relpath(path.rstrip("/"), base).replace(os.sep, "/")
    return rel + "/" if path.endswith("/") else rel


def _excluded(path, root, exclude_spec, ignores):
    if exclude_spec is not None and exclude_spec.match_file(_relative(path, root)):
        return True
    return any(spec.match_file(_relative(path, directory)) for directory, spec in ignores)


def sources(path):
    """The :class:`Source` list of ``path``; raises :class:`SourceError` if it cannot be read."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise SourceError(f"cannot read: {exc.strerror or exc}") from None
    if path.endswith(".ipynb"):
        return _notebook_cells(data)
    return [Source(_decode(data))]


def _decode(data):
    """Python source bytes to text, as the interpreter decodes them (PEP 263 / BOM / UTF-8)."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, LookupError) as exc:
        raise SourceError(f"cannot decode: {exc}") from None
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise SourceError(f"cannot decode as {exc.encoding}: invalid byte {data[exc.start:exc.start + 1]!r} "
                          "(declare the file's encoding with a '# -*- coding: ... -*-' line)",
                          line, column) from None
    return text[1:] if text.startswith("\ufeff") else text


#: A line that is IPython syntax, not Python: ``%magic``, ``!shell``, ``x = !shell``, ``obj?``.
_MAGIC_LINE = re.compile(r"^(\s*)(?:(?:[\w.\[\], ]+=\s*)?[%!]|[\w.]+\?\??\s*$)")
#: ``%time stmt`` / ``%timeit stmt`` / ``%prun stmt``: the statement is Python.
_TIMED_MAGIC = re.compile(r"^(\s*)(%(?:time|timeit|prun)\b(?:\s+-\S+)*)(.*)$")
#: Cell magics whose body is still Python.
_PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug"}


def _without_magics(lines):
    """The cell as Python: unchanged if it parses, else with IPython lines replaced by ``pass``
    (same indentation, so line numbers and blocks stay)."""
    text = "\n".join(lines)
    try:
        ast.parse(text)
        return text
    except (SyntaxError, ValueError):
        pass
    return "\n".join(_python_of(line) for line in lines)


def _python_of(line):
    """``%timeit f(x)`` keeps ``f(x)`` (blanked magic, same columns); other IPython lines
    become ``pass``."""
    match = _MAGIC_LINE.match(line)
    if match is None:
        return line
    timed = _TIMED_MAGIC.match(line)
    if timed is not None and timed.group(3).strip():
        return timed.group(1) + " " * len(timed.group(2)) + timed.group(3)
    return match.group(1) + "pass"


def _notebook_cells(data):
    try:
        notebook = json.loads(data.decode("utf-8"))
        cells = notebook["cells"]
    except (UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise SourceError(f"not a readable notebook (nbformat 4 JSON): {exc}") from None
    out = []
    for index, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        lines = text.split("\n")
        if lines and lines[0].startswith("%%"):
            magic = lines[0][2:].split(None, 1)[0] if lines[0][2:].strip() else ""
            if magic not in _PYTHON_CELL_MAGICS:
                continue  # %%bash, %%writefile, ...: not Python
            lines[0] = ""
        out.append(Source(_without_magics(lines), cell=index))
    return out

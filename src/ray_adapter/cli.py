"""The ``ray-adapter`` command: ``report``, ``run`` and ``doctor``."""
import argparse
import json
import os
import sys

from ray_adapter import RAY_API_VERSION, __version__, matrix


def _coverage(entries, backend):
    total = len(entries)
    counts = {s: sum(1 for e in entries if e.status(backend) == s) for s in matrix.STATUSES}
    covered = counts["supported"] + counts["partial"]
    return counts, (100.0 * covered / total if total else 0.0)


def _rows(backend):
    for module, data in matrix.modules().items():
        entries = list(data["symbols"].values())
        counts, pct = _coverage(entries, backend)
        yield module, data["module_status"], counts, pct, entries


def report(args):
    backend = args.backend
    if args.symbol:
        return _report_symbol(args.symbol)
    if args.format == "json":
        out = {"ray_version": RAY_API_VERSION, "adapter_version": __version__, "backend": backend,
               "modules": {}}
        for module, status, counts, pct, entries in _rows(backend):
            out["modules"][module] = {
                "module_status": status, "counts": counts, "coverage_percent": round(pct, 1),
                "symbols": {e.name: {"kind": e.kind, "status": e.status(backend), "note": e.note}
                            for e in entries}}
        out["submodules"] = {name: {"status": e.status(backend), "note": e.note}
                             for name, e in matrix.submodule_entries().items()}
        print(json.dumps(out, indent=2, sort_keys=True))
        return 0
    md = args.format == "markdown"
    print(f"{'# ' if md else ''}ray-adapter {__version__}: Ray {RAY_API_VERSION} API coverage "
          f"({backend} backend)\n")
    header = ("module", "supported", "partial", "gap", "coverage")
    lines = []
    total_counts = dict.fromkeys(matrix.STATUSES, 0)
    for module, status, counts, pct, entries in _rows(backend):
        for s in matrix.STATUSES:
            total_counts[s] += counts[s]
        label = module if status == "supported" else f"{module} (module: {status})"
        lines.append((label, str(counts["supported"]), str(counts["partial"]), str(counts["gap"]),
                      f"{pct:.0f}%"))
    n = sum(total_counts.values())
    pct = 100.0 * (total_counts["supported"] + total_counts["partial"]) / n if n else 0.0
    lines.append(("TOTAL", str(total_counts["supported"]), str(total_counts["partial"]),
                  str(total_counts["gap"]), f"{pct:.0f}%"))
    _print_table(header, lines, md)
    whole = [(name, e.status(backend), e.note) for name, e in sorted(matrix.submodule_entries().items())]
    print(f"\n{'## ' if md else ''}Ray modules not provided ({len(whole)}): importing one raises "
          "ModuleNotFoundError with the reason")
    _print_table(("module", "status", "note"), whole, md)
    if args.verbose:
        for module, _, _, _, entries in _rows(backend):
            print(f"\n{'## ' if md else ''}{module}")
            _print_table(("symbol", "kind", "status", "note"),
                         [(e.name, e.kind, e.status(backend), e.note) for e in
                          sorted(entries, key=lambda e: e.name)], md)
    return 0


def _report_symbol(qualname):
    module, _, name = qualname.rpartition(".")
    entry = matrix.lookup(module, name) or matrix.module_entry(qualname)
    if entry is None:
        print(f"{qualname}: not in the compat matrix (not a public symbol of Ray {RAY_API_VERSION})")
        short = qualname.rpartition(".")[2]
        matches = [e.qualname for mod in matrix.modules() for n, e in matrix.symbols(mod).items() if n == short]
        matches += [m for m in matrix.submodule_entries() if m.rpartition(".")[2] == short]
        if matches:
            print("did you mean: " + ", ".join(sorted(matches)))
        return 1
    print(f"{entry.qualname} ({entry.kind})")
    for backend in matrix.BACKENDS:
        print(f"  {backend}: {entry.status(backend)}")
    if entry.note:
        print(f"  note: {entry.note}")
    return 0


def _print_table(header, rows, markdown):
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "|".join("---" for _ in header) + "|")
        for row in rows:
            print("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
        return
    widths = [min(60, max(len(str(r[i])) for r in [header, *rows])) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    print(fmt.format(*header))
    print(fmt.format(*("-" * w for w in widths)))
    for row in rows:
        print(fmt.format(*row))


def run(args):
    """Run a command with the hook active in it and every child (``RAY_BACKEND=yuanrong``).

    For ``python script.py ...`` the hook is installed explicitly before the script runs, so it
    works even where ``.pth`` files are not processed; ``ray_adapter`` is put on ``PYTHONPATH``
    so child interpreters find it too.
    """
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("ray-adapter run: no command given (usage: ray-adapter run -- python script.py)",
              file=sys.stderr)
        return 2
    env = dict(os.environ)
    env["RAY_BACKEND"] = "yuanrong"
    import sysconfig

    # ray_adapter and its dependencies stay importable even where site-packages is not on
    # sys.path (python -S).
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    site_dirs = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(
        p for p in (package_root, *site_dirs, env.get("PYTHONPATH")) if p))
    if os.path.basename(command[0]).startswith("python"):
        command = _bootstrapped_python(command)
    try:
        os.execvpe(command[0], command, env)
    except FileNotFoundError:
        print(f"ray-adapter run: command not found: {command[0]}", file=sys.stderr)
        return 127


#: Interpreter options that take a value (``-W default``), up to the script / -m / -c.
_PY_OPTS_WITH_VALUE = {"-W", "-X", "--check-hash-based-pycs"}
_BOOT = "import sys, runpy; import ray_adapter.auto; "


def _bootstrapped_python(command):
    """``python [opts] script.py|-m mod|-c code args`` with the hook installed first, so it
    works even where ``.pth`` files are not processed (``python -S``)."""
    i = 1
    while i < len(command) and command[i].startswith("-") and command[i] not in ("-m", "-c", "-"):
        i += 2 if command[i] in _PY_OPTS_WITH_VALUE else 1
    opts, rest = command[1:i], command[i:]
    if not rest or rest[0] == "-":
        return command  # interactive or stdin: nothing to wrap
    if rest[0] == "-m" and len(rest) > 1:
        boot = _BOOT + "sys.argv = sys.argv[1:]; runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
        return [command[0], *opts, "-c", boot, *rest[1:]]
    if rest[0] == "-c" and len(rest) > 1:
        boot = _BOOT + "code = sys.argv[1]; sys.argv = ['-c', *sys.argv[2:]]; exec(compile(code, '<string>', 'exec'), {'__name__': '__main__'})"
        return [command[0], *opts, "-c", boot, *rest[1:]]
    boot = _BOOT + "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    return [command[0], *opts, "-c", boot, *rest]


def doctor(args):
    """Say whether the hook is installed and active, and which backend ``ray.init()`` would use."""
    import importlib.util
    import site
    import sysconfig

    from ray_adapter import _boot, core, hook

    ok = True
    paths = {sysconfig.get_paths()["purelib"], *getattr(site, "getsitepackages", lambda: [])()}
    pth = [os.path.join(p, "ray_adapter.pth") for p in paths if os.path.exists(os.path.join(p, "ray_adapter.pth"))]
    print(f"ray-adapter {__version__} (Ray API {RAY_API_VERSION})")
    print(f"  hook file: {pth[0] if pth else 'NOT FOUND in site-packages (use `ray-adapter run` or `import ray_adapter.auto`)'}")
    ok &= bool(pth)
    print(f"  RAY_BACKEND={os.environ.get('RAY_BACKEND', '')!r}: `import ray` is served by "
          f"{'ray-adapter' if _boot.enabled() else 'real Ray, if installed (set RAY_BACKEND=yuanrong to use ray-adapter)'}")
    print(f"  finder installed in this process: {hook.installed_finder() is not None}")
    with hook.disabled():
        real = importlib.util.find_spec("ray") if "ray" not in sys.modules else None
    if real is not None and real.origin and "ray_adapter" not in real.origin:
        print(f"  note: real Ray is installed too ({real.origin}); with RAY_BACKEND=yuanrong the "
              "adapter shadows it")
    address = args.address or os.environ.get("RAY_ADDRESS") or None
    backend = core.select_backend(address)
    print(f"  runtime backend for ray.init({'address=' + repr(address) if address else ''}): {backend}"
          + ("  (the default single-machine runtime; a Yuanrong cluster address or "
             "RAY_ADAPTER_RUNTIME=yr-local selects yuanrong)" if backend == "embedded" else ""))
    if backend == "yuanrong":
        ok &= _doctor_yuanrong(address)
    return 0 if ok else 1


def _doctor_yuanrong(address):
    """Is the openYuanrong SDK importable, and (for a cluster) does the address answer?"""
    from ray_adapter.core.yuanrong import backend as yrb

    try:
        yrb.load_yr()
    except ImportError as exc:
        print(f"  openYuanrong SDK: MISSING: {exc}")
        return False
    print("  openYuanrong SDK: installed")
    if os.environ.get("RAY_ADAPTER_RUNTIME", "").lower() == "yr-local":
        print("  mode: yr local mode (RAY_ADAPTER_RUNTIME=yr-local): no cluster needed")
        return True
    target = address or os.environ.get("YR_SERVER_ADDRESS", "")
    for scheme in ("yr://", "http://", "https://"):
        target = target[len(scheme):] if target.startswith(scheme) else target
    print(f"  cluster {target!r}: connecting (an unreachable address takes yr about 6 s to fail)...")
    ok, message, seconds = yrb.probe(target)
    if ok:
        print(f"  cluster {target!r}: reachable ({seconds:.1f} s)")
        return True
    print(f"  cluster {target!r}: NOT reachable after {seconds:.1f} s: {message}")
    print("  hint: check YR_SERVER_ADDRESS / the address (host:port of the Yuanrong frontend), "
          "YR_DS_ADDRESS, and YR_JWT_TOKEN / YR_CERT_FILE for secured clusters")
    return False


def main(argv=None):
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `ray-adapter report | head` ends quietly
    parser = argparse.ArgumentParser(prog="ray-adapter", description="Run Ray programs on Yuanrong.")
    parser.add_argument("--version", action="version", version=f"ray-adapter {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("report", help="print the compat matrix with coverage per module")
    p.add_argument("--backend", choices=matrix.BACKENDS, default="embedded")
    p.add_argument("--format", choices=("table", "json", "markdown"), default="table")
    p.add_argument("--symbol", help="show one symbol, e.g. ray.util.placement_group")
    p.add_argument("-v", "--verbose", action="store_true", help="list every symbol")
    p.set_defaults(func=report)

    p = sub.add_parser("run", help="run a command with the adapter's ray (RAY_BACKEND=yuanrong)")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)

    p = sub.add_parser("doctor", help="check the hook installation and backend selection")
    p.add_argument("--address", help="the address ray.init(address=...) would get")
    p.set_defaults(func=doctor)

    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())

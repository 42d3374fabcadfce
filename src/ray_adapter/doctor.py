"""``ray-adapter doctor``: can this set-up run a Ray program, and on what?

It says whether the import hook is installed and what ``RAY_BACKEND`` selects (warning on a
value the adapter does not know), whether real Ray is installed and whether the adapter shadows
it, which runtime backend ``ray.init()`` would pick and why, and, for the yuanrong backend,
whether the SDK is installed and the cluster answers. :func:`diagnose` prints the report and
returns the exit status: 0 when ``import ray`` and ``ray.init()`` can work, 1 when not.
"""
import importlib.util
import os
import platform
import site
import sys
import sysconfig

from ray_adapter import RAY_API_VERSION, __version__

SUPPORTED_PYTHON = (3, 9)


class _Report:
    def __init__(self, out):
        self.out = out
        self.problems = []

    def line(self, text):
        print(f"  {text}", file=self.out)

    def problem(self, text):
        self.problems.append(text)
        print(f"  PROBLEM: {text}", file=self.out)

    def warning(self, text):
        print(f"  WARNING: {text}", file=self.out)


def _hook_file():
    paths = {sysconfig.get_paths()["purelib"], *getattr(site, "getsitepackages", lambda: [])()}
    found = [os.path.join(p, "ray_adapter.pth") for p in sorted(paths)
             if os.path.exists(os.path.join(p, "ray_adapter.pth"))]
    return found[0] if found else None


def _real_ray():
    """``(origin, version)`` of a real Ray installation, or None (looked up with the hook off)."""
    from ray_adapter import hook

    with hook.disabled():
        module = sys.modules.get("ray")
        if module is not None and "ray_adapter" not in (getattr(module, "__file__", "") or ""):
            origin = module.__file__
        else:
            try:
                spec = importlib.util.find_spec("ray") if module is None else None
            except (ImportError, ValueError):
                spec = None
            origin = spec.origin if spec is not None and spec.origin and "ray_adapter" not in spec.origin else None
        if origin is None:
            return None
        try:
            from importlib.metadata import PackageNotFoundError, version

            found = version("ray")
        except (PackageNotFoundError, ImportError):
            found = "unknown version"
    return origin, found


def backend_choice(address):
    """``(backend, why)``: what ``ray.init(address=address)`` would run on, and the setting that
    decides it (mirrors :func:`ray_adapter.core.select_backend`, which has the last word)."""
    from ray_adapter import core

    backend = core.select_backend(address)
    runtime = os.environ.get("RAY_ADAPTER_RUNTIME", "").strip()
    if runtime:
        why = f"RAY_ADAPTER_RUNTIME={runtime!r}"
        if runtime.lower() == "yr-local":
            why += " (yr's local mode: tasks run as threads of the driver; no cluster needed)"
    elif address not in (None, "", "local"):
        source = "RAY_ADDRESS" if address == os.environ.get("RAY_ADDRESS") else "the address"
        why = f"{source} {address!r} names a cluster"
    elif os.environ.get("YR_SERVER_ADDRESS"):
        why = f"YR_SERVER_ADDRESS={os.environ['YR_SERVER_ADDRESS']!r} names a Yuanrong cluster"
    else:
        why = ("the default: no cluster address (ray.init(address=...), RAY_ADDRESS, "
               "YR_SERVER_ADDRESS) and no RAY_ADAPTER_RUNTIME; the single-machine runtime")
    return backend, why


def diagnose(address=None, out=None):
    """Print the report for ``ray.init(address=address)``; return 0 if the set-up can work."""
    from ray_adapter import _boot, core, hook

    out = out or sys.stdout
    report = _Report(out)
    print(f"ray-adapter {__version__} (Ray API {RAY_API_VERSION}), Python "
          f"{platform.python_version()} on {platform.system()}", file=out)
    if sys.version_info < SUPPORTED_PYTHON:
        report.problem(f"Python {platform.python_version()} is older than the supported "
                       f"{'.'.join(map(str, SUPPORTED_PYTHON))}")
    if platform.system() != "Linux":
        report.warning(f"{platform.system()} is not a supported OS (ray-adapter is built and "
                       "tested on Linux)")

    pth = _hook_file()
    if pth:
        report.line(f"hook file: {pth}")
    else:
        report.problem("hook file ray_adapter.pth NOT FOUND in site-packages: use `ray-adapter run` "
                       "or `import ray_adapter.auto`, or reinstall")

    raw = os.environ.get("RAY_BACKEND", "")
    enabled = _boot.enabled()
    unknown = _boot.unknown_value()
    if enabled:
        report.line(f"RAY_BACKEND={raw!r}: `import ray` is served by ray-adapter")
    elif unknown is not None:
        report.problem(_boot.unknown_value_message(unknown))
    else:
        report.line("RAY_BACKEND is not set: ray-adapter is off and `import ray` is real Ray, if "
                    "installed (set RAY_BACKEND=yuanrong to use ray-adapter)")
    report.line(f"finder installed in this process: {hook.installed_finder() is not None}")

    real = _real_ray()
    if real is None:
        report.line("real Ray: not installed")
        if not enabled:
            report.problem("`import ray` would fail (No module named 'ray'): real Ray is not "
                           "installed and ray-adapter is off; set RAY_BACKEND=yuanrong")
    else:
        origin, version = real
        state = ("shadowed: with RAY_BACKEND=yuanrong `import ray` is the adapter" if enabled
                 else "`import ray` gives it (the adapter is off)")
        report.line(f"real Ray: installed (ray {version}, {origin}); {state}")

    address = address or os.environ.get("RAY_ADDRESS") or None
    backend, why = backend_choice(address)
    call = f"ray.init({'address=' + repr(address) if address else ''})"
    when = "" if enabled else " once RAY_BACKEND=yuanrong is set"
    report.line(f"runtime backend for {call}{when}: {backend}  (because {why})")
    try:
        core.load_backend_class(backend)
    except Exception as exc:  # noqa: BLE001 - an unknown name, or a backend that fails to import
        report.problem(f"backend {backend!r} cannot be loaded: {exc}")
        return _finish(report, out)
    if backend == "yuanrong":
        _check_yuanrong(report, address)
    return _finish(report, out)


def _finish(report, out):
    if report.problems:
        print(f"result: {len(report.problems)} problem(s): this set-up cannot run a Ray program as is",
              file=out)
        return 1
    print("result: OK", file=out)
    return 0


#: What yr-local (tasks and actors as threads of the driver) cannot preview faithfully; the
#: README's yr-local section says the same.
YR_LOCAL_LIMITS = (
    "yr-local is a preview: tasks and actors run as threads of the driver process. "
    "What it cannot preview faithfully:",
    "- process exits: os._exit / os.abort in a task or actor end the driver itself (the "
    "adapter says so on stderr first); Ray ends only that worker (WorkerCrashedError, "
    "ActorDiedError); sys.exit is handled as Ray does",
    "- process isolation: one os.environ, sys.path and cwd for every call (runtime_env "
    "env_vars and CUDA_VISIBLE_DEVICES are per call for Python reads only, not for CUDA, "
    "native code or subprocesses), and CPU-bound calls share the GIL",
    "- interrupting: a running task cannot be cancelled (it finishes, its result is dropped); "
    "a crashed actor restarts within the call that crashed it",
    "- resources ARE kept as Ray keeps them (by the adapter): work that does not fit waits, "
    "available_resources() shows use, ray.get_gpu_ids() gives the granted ids",
    "for a faithful preview of processes use the embedded runtime (unset RAY_ADAPTER_RUNTIME)",
)


def _check_yuanrong(report, address):
    """Is the openYuanrong SDK importable, and (for a cluster) does the address answer?"""
    from ray_adapter.core.yuanrong import backend as yrb

    try:
        yrb.load_yr()
    except ImportError as exc:
        report.problem(f"openYuanrong SDK: MISSING: {exc}")
        return
    report.line("openYuanrong SDK: installed")
    if os.environ.get("RAY_ADAPTER_RUNTIME", "").strip().lower() == "yr-local":
        report.line("mode: yr local mode (RAY_ADAPTER_RUNTIME=yr-local): no cluster needed")
        for text in YR_LOCAL_LIMITS:
            report.line(text)
        return
    target = address or os.environ.get("YR_SERVER_ADDRESS", "")
    for scheme in ("yr://", "http://", "https://"):
        target = target[len(scheme):] if target.startswith(scheme) else target
    report.line(f"cluster {target!r}: connecting (an unreachable address takes yr about 6 s to fail)...")
    ok, message, seconds = yrb.probe(target)
    if ok:
        report.line(f"cluster {target!r}: reachable ({seconds:.1f} s)")
        return
    report.problem(f"cluster {target!r}: NOT reachable after {seconds:.1f} s: {message}")
    report.line("hint: check YR_SERVER_ADDRESS / the address (host:port of the Yuanrong frontend), "
                "YR_DS_ADDRESS, and YR_JWT_TOKEN / YR_CERT_FILE for secured clusters")

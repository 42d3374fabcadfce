"""Entry script of a worker process started with a runtime env's ``py_executable``.

Ray starts such a worker as ``bash -c "exec <py_executable> <path of default_worker.py> ..."``:
the command is a prefix (an interpreter, ``uv run ...``, a wrapper script), the script's path
follows it. The embedded runtime does the same with this file and the worker's socket FD.

It imports nothing but the standard library until it knows ``ray_adapter`` is there: an
interpreter without it exits with :data:`NO_ADAPTER_EXIT_CODE`, saying so on stderr, and the
driver fails the task or actor with RuntimeEnvSetupError naming the ``py_executable``.
"""
import sys

#: Exit code of a worker whose interpreter cannot import ray_adapter (the driver's pool knows it).
NO_ADAPTER_EXIT_CODE = 96


def _run():
    import os

    # This script's folder is sys.path[0] (a script, as Ray's default_worker.py); it holds
    # nothing a user imports, so it is dropped.
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    try:
        from ray_adapter.core.embedded import worker
    except ImportError as exc:
        sys.stderr.write(
            f"ray-adapter: the worker interpreter {sys.executable} (started by the runtime_env's "
            f"py_executable) cannot import ray_adapter ({exc}); install ray-adapter into that "
            "environment.\n")
        sys.stderr.flush()
        raise SystemExit(NO_ADAPTER_EXIT_CODE)
    worker.main(sys.argv[1:])


if __name__ == "__main__":
    _run()

"""``ray-adapter run -- COMMAND``: run a command with the adapter's ``ray`` in it and in every
child process (``RAY_BACKEND=yuanrong``), even where ``.pth`` files are not processed."""
import os
import sys


def run(command):
    """Run a command with the hook active in it and every child (``RAY_BACKEND=yuanrong``).

    For ``python script.py ...`` the hook is installed explicitly before the script runs, so it
    works even where ``.pth`` files are not processed; ``ray_adapter`` is put on ``PYTHONPATH``
    so child interpreters find it too.
    """
    command = list(command)
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
    import signal

    # The command starts as from a shell: SIGPIPE at its default (Python ignores it).
    previous = signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        os.execvpe(command[0], command, env)
    except FileNotFoundError:
        signal.signal(signal.SIGPIPE, previous)
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

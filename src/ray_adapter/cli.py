"""The ``ray-adapter`` command: ``scan``, ``report``, ``run`` and ``doctor`` (argument parsing;
the work is in :mod:`ray_adapter.scan`, :mod:`ray_adapter.report` and :mod:`ray_adapter.doctor`)."""
import argparse
import json
import os
import sys

from ray_adapter import __version__, matrix


def report(args):
    from ray_adapter import report as reporting

    if args.symbol:
        text, code = reporting.symbol_report(args.symbol, args.backend, as_json=args.format == "json")
        print(text)
        return code
    if args.format == "json":
        print(json.dumps(reporting.report_json(args.backend), indent=2, sort_keys=True))
        return 0
    print("\n".join(reporting.report_lines(args.backend, markdown=args.format == "markdown",
                                            verbose=args.verbose)))
    return 0


def scan(args):
    from ray_adapter import scan as scanner
    from ray_adapter.scan import output

    result = scanner.scan(args.paths, backend=args.backend, excludes=args.exclude or (),
                          use_gitignore=not args.no_gitignore, jobs=args.jobs)
    if args.format == "json":
        text = json.dumps(output.as_json(result, args.fail_on), indent=2) + "\n"
    elif args.format == "sarif":
        text = json.dumps(output.sarif(result), indent=2) + "\n"
    else:
        text = output.text(result, quiet=args.quiet)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text)
        if args.format != "text":
            print("\n".join(output.summary(result)), file=sys.stderr)
    else:
        sys.stdout.write(text)
    return result.exit_code(args.fail_on)


def run(args):
    from ray_adapter import runner

    return runner.run(args.command)


def doctor(args):
    from ray_adapter import doctor as diagnosis

    return diagnosis.diagnose(args.address)


def main(argv=None):
    """The ``ray-adapter`` command (``argv``: its arguments, default ``sys.argv[1:]``); returns
    its exit status. Process-wide state is left alone (it may be called in-process): a closed
    output pipe (``ray-adapter report | head``) ends it quietly with status 141."""
    parser = argparse.ArgumentParser(prog="ray-adapter", description="Run Ray programs on Yuanrong.")
    parser.add_argument("--version", action="version", version=f"ray-adapter {__version__}")
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("scan", help="check Python files and notebooks for Ray APIs the adapter lacks",
                       description="Parse Python files and notebooks (never importing or running "
                       "them) and list every use of Ray with its status in the compat matrix. "
                       "Exit status: 0 fine, 1 partial or unknown uses (with --fail-on partial), "
                       "2 gap uses, 3 a file could not be scanned (the highest applies).")
    p.add_argument("paths", nargs="+", metavar="PATH", help="files or directories (.py, .ipynb)")
    p.add_argument("--backend", choices=matrix.BACKENDS, default="embedded",
                   help="the backend whose statuses apply (default: embedded)")
    p.add_argument("--format", choices=("text", "json", "sarif"), default="text")
    p.add_argument("--fail-on", choices=("gap", "partial"), default="gap",
                   help="exit non-zero from this status up (default: gap)")
    p.add_argument("--exclude", action="append", metavar="PATTERN",
                   help="gitignore-style pattern of paths to skip (repeatable)")
    p.add_argument("--no-gitignore", action="store_true", help="do not honour .gitignore files")
    p.add_argument("-j", "--jobs", type=int, default=None,
                   help="processes to parse with (default: one per CPU for large trees)")
    p.add_argument("-q", "--quiet", action="store_true", help="text format: leave out supported uses")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE")
    p.set_defaults(func=scan)

    p = sub.add_parser("report", help="print the compat matrix with coverage per module")
    p.add_argument("--backend", choices=matrix.BACKENDS, default="embedded")
    p.add_argument("--format", choices=("table", "json", "markdown"), default="table")
    p.add_argument("--symbol", help="show one entry: a symbol (ray.util.placement_group) or an "
                   "option (num_cpus, task.num_cpus, ray.remote.num_cpus, actor.max_concurrency); "
                   "exit status 0 found, 2 a gap on --backend, 1 not in the matrix")
    p.add_argument("-v", "--verbose", action="store_true", help="list every symbol")
    p.set_defaults(func=report)

    p = sub.add_parser("run", help="run a command with the adapter's ray (RAY_BACKEND=yuanrong)")
    p.add_argument("command", nargs=argparse.REMAINDER)
    p.set_defaults(func=run)

    p = sub.add_parser("doctor", help="check the hook installation and backend selection")
    p.add_argument("--address", help="the address ray.init(address=...) would get")
    p.set_defaults(func=doctor)

    args = parser.parse_args(argv)
    try:
        status = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away: nothing more to say. Further writes (at exit) go nowhere.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    return status


if __name__ == "__main__":
    sys.exit(main())

"""The process a submitted job's entrypoint runs under: ``python -I -m
ray_adapter.core.embedded.job_runner ENTRYPOINT`` (started by :mod:`.jobs` in a session of its
own, its output the job's log pipe).

It gives the entrypoint what a shell started by a user would have: a clean signal mask (the
head's threads block the signals their process handles in its main thread, and a child inherits
its parent's mask), default dispositions. It runs ``bash -c ENTRYPOINT`` and is a child
subreaper, so whatever the entrypoint starts stays its descendant even after ``setsid`` or a
double fork; SIGTERM / SIGINT sent to its group (``ray job stop``) reach those that left the
group too; when the
entrypoint's shell ends, every descendant left is killed and reaped, then the runner exits with
the shell's status (128 + N for a signal N, as a shell reports it). So nothing of a job outlives
it, and the log pipe closes with it.
"""
import signal
import subprocess
import sys

from ray_adapter.core.process_tree import become_subreaper, end_descendants, signal_descendants


def main(entrypoint):
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    become_subreaper()
    shell = subprocess.Popen(["/bin/bash", "-c", entrypoint])

    def forward(signum, frame):  # the group got it (killpg): those that left it get it too
        signal_descendants(signum, outside_group=True)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    code = shell.wait()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    end_descendants()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

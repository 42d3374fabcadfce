"""The "ray" logger as `import ray` and `ray.init` set it up: its level, propagation and
handler, the driver's record format (on stderr: the program catches its own fd 2),
`ray.init(logging_level=..., logging_format=...)` and `configure_logging=False`."""
import logging
import os
import re
import tempfile

import ray

# fd 2 appends to a temporary file, read with pread: reading never moves the offset that
# writers (any thread of the runtime) write at.
_capture = tempfile.TemporaryFile()
os.dup2(os.open(f"/proc/self/fd/{_capture.fileno()}", os.O_WRONLY | os.O_APPEND), 2)

root_records = []


class Keep(logging.Handler):
    def emit(self, record):
        root_records.append(record.getMessage())


def emitted(logger_name, level, message):
    """What the ray logger writes for one record (the time stamp replaced)."""
    start = os.fstat(_capture.fileno()).st_size
    logging.getLogger(logger_name).log(level, message)
    end = os.fstat(_capture.fileno()).st_size
    written = os.pread(_capture.fileno(), end - start, start).decode("utf-8", "replace")
    text = "".join(line for line in written.splitlines(keepends=True) if message in line)
    return re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}", "<time>", text)


def main():
    logging.getLogger().addHandler(Keep())
    ray_logger = logging.getLogger("ray")
    print("after import: level", logging.getLevelName(ray_logger.level), "propagate", ray_logger.propagate,
          "handlers", len(ray_logger.handlers), "rllib", logging.getLevelName(logging.getLogger("ray.rllib").level))
    print("info record:", repr(emitted("ray.mine", logging.INFO, "hello")))
    print("debug record:", repr(emitted("ray.mine", logging.DEBUG, "hidden")))
    print("root saw:", root_records)

    ray.init(num_cpus=1, logging_level="warning", logging_format="%(levelname)s|%(name)s|%(message)s")
    print("init(logging_level='warning'): level", logging.getLevelName(ray_logger.level))
    print("info record:", repr(emitted("ray.mine", logging.INFO, "quiet")))
    print("warning record:", repr(emitted("ray.mine", logging.WARNING, "loud")))
    ray.shutdown()

    ray.init(num_cpus=1, configure_logging=False)
    print("configure_logging=False: handlers", len(ray_logger.handlers))
    ray.shutdown()
    print("done")


if __name__ == "__main__":
    main()

"""What `ray.init` refuses as Ray 2.60 refuses it (RuntimeError: an unknown keyword, `storage`,
`allow_multiple`, `local_mode=True`), the private keywords it takes, and its INFO lines on the
"ray" logger: a runtime started, `ray.init` called again."""
import logging

import ray

logged = []


class Keep(logging.Handler):
    def emit(self, record):
        message = record.getMessage()
        if message.startswith(("Started a local Ray instance", "Calling ray.init() again",
                                "Connecting to existing Ray cluster", "Connected to Ray cluster")):
            logged.append(message.split(" View the dashboard")[0])  # (Ray's, when it has one)


logging.getLogger("ray").addHandler(Keep())

for kwargs in (dict(bogus_kw=1, other=2), dict(storage="/tmp/ray-storage"), dict(storage=None),
               dict(allow_multiple=True), dict(allow_multiple=False), dict(local_mode=True),
               dict(local_mode=False, _redis_username="me", _node_name="n1", _skip_env_hook=True)):
    try:
        ray.init(num_cpus=1, **kwargs)
        print(sorted(kwargs), "started")
        ray.shutdown()
    except RuntimeError as e:
        print(sorted(kwargs), "RuntimeError:", e)
    print("   initialized:", ray.is_initialized())

ray.init(num_cpus=1)
ray.init(ignore_reinit_error=True)
try:
    ray.init()
except RuntimeError as e:
    print("again:", str(e)[:60])
ray.shutdown()
print("logged:", logged)

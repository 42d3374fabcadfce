"""Errors of storing values, as Ray raises them (found by an adversarial run).

- No memory for a value's buffer: ``ObjectStoreFullError`` (Ray's class for a put the store
  cannot hold), not the serialization ``TypeError`` it used to be.
- Only a ``TypeError`` of the pickler is Ray's "Could not serialize ..." ``TypeError``; what
  else pickling raises passes as it is (Ray 2.60 measured: a 100,000-deep list raises
  ``PicklingError('Could not pickle object as excessively deep recursion required.')`` from
  ``ray.put`` and from ``f.remote``; a ``__reduce__`` raising ``ValueError`` or ``MemoryError``
  raises that).
"""
import pickle
import textwrap

import pytest

from conftest import run_code


def test_no_memory_for_a_put_is_object_store_full():
    # The driver's address space is capped just above what it uses: a 300 MiB buffer cannot
    # be mapped (the cheap, deterministic stand-in for a machine out of memory).
    result = run_code(textwrap.dedent("""
        import resource
        import numpy as np, psutil, ray
        ray.init(num_cpus=1)

        @ray.remote
        def size(x):
            return len(x)

        big = np.ones(300 << 20, dtype=np.uint8)
        assert ray.get(size.remote(np.ones(2 << 20, dtype=np.uint8))) == 2 << 20  # a worker runs
        cap = psutil.Process().memory_info().vms + (200 << 20)
        resource.setrlimit(resource.RLIMIT_AS, (cap, resource.RLIM_INFINITY))
        for what, call in (("put", lambda: ray.put(big)), ("argument", lambda: size.remote(big))):
            try:
                call()
                print(what, "stored")
            except ray.exceptions.ObjectStoreFullError as exc:
                text = str(exc)
                print(what, "ObjectStoreFullError", "Object size is 314572800 bytes" in text,
                      "Cannot allocate memory" in text)
        # Smaller values still go (the runtime is fine).
        print(ray.get(ray.put(np.ones(2 << 20, dtype=np.uint8))).sum())
    """), env={"RAY_ADAPTER_RUNTIME": "embedded"}, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[:3] == [
        "put ObjectStoreFullError True True", "argument ObjectStoreFullError True True",
        str(2 << 20)], result.stdout


def _deep(depth):
    value = cur = []
    for _ in range(depth):
        cur.append([])
        cur = cur[0]
    return value


class _ReduceFails:
    def __init__(self, exc):
        self.exc = exc

    def __reduce__(self):
        raise self.exc


def test_pickling_errors_other_than_type_errors_pass_as_they_are(ray):
    @ray.remote
    def ident(x):
        return x

    deep = _deep(100_000)
    deep_text = "Could not pickle object as excessively deep recursion required."
    for call in (lambda v: ray.put(v), lambda v: ident.remote(v)):
        with pytest.raises(pickle.PicklingError) as info:
            call(deep)
        assert str(info.value) == deep_text and not isinstance(info.value, TypeError)
        with pytest.raises(ValueError, match="^no reduce$"):
            call(_ReduceFails(ValueError("no reduce")))
        with pytest.raises(MemoryError, match="^no memory$"):
            call(_ReduceFails(MemoryError("no memory")))
    # A TypeError still is Ray's "Could not serialize" TypeError.
    import threading

    with pytest.raises(TypeError, match="Could not serialize the put value"):
        ray.put(threading.Lock())

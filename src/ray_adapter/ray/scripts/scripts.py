"""``ray.scripts.scripts``: the module of Ray's ``ray`` command. Programs import
:func:`memory_summary` from it at module top level; :func:`main` is the ``ray`` command itself
(``ray start --head``, ``ray stop``, ``ray status``, ``ray list ...``), which real Ray's own
console script calls too when the adapter serves ``ray``. The rest of the module is a gap (see
``compat_matrix/ray.scripts.scripts.toml``)."""
from ray_adapter import gaps
from ray_adapter.ray.scripts._cli import main

_NO_TABLE = ("(ray-adapter: the per-object table of `ray memory` is not provided; "
             "the aggregate object store stats follow)\n")


def memory_summary(address=None, group_by="NODE_ADDRESS", sort_by="OBJECT_SIZE", units="B",
                   line_wrap=True, stats_only=False, num_entries=None):
    """The object store summary of ``ray memory`` as a string (mirrors
    ``ray._private.internal_api.memory_summary``): the aggregate section, ``Plasma memory
    usage <MiB> MiB, <n> objects, <p>% full, <p>% needed``, of the running runtime (``address``
    is not needed). Without ``stats_only`` a line first says the per-object table is not
    provided. Raises ``ConnectionError`` when no runtime is running, as Ray does."""
    from ray_adapter.ray._private.core_access import started, translated

    if not started():
        raise ConnectionError("Could not find any running Ray instance. Please specify the one "
                              "to connect to by setting `--address` flag or `RAY_ADDRESS` "
                              "environment variable.")
    from ray_adapter import core

    with translated:
        stats = core.current().object_store_stats()
    used, avail = stats["bytes_used"], max(stats["bytes_avail"], 1)
    summary = ("--- Aggregate object store stats across all nodes ---\n"
               f"Plasma memory usage {int(used / (1024 * 1024))} MiB, {stats['num_objects']} "
               f"objects, {round(100 * used / avail, 2)}% full, {round(100 * used / avail, 2)}% "
               "needed\n")
    return summary if stats_only else _NO_TABLE + summary


__getattr__ = gaps.module_getattr("ray.scripts.scripts")


if __name__ == "__main__":  # python -m ray.scripts.scripts, as with Ray's
    main()

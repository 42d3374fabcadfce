"""The embedded backend: a single-machine runtime started by ``ray.init()``.

``backend`` is the driver side (scheduler, object table, actor registry); ``worker`` is the
worker-process main loop; ``channel`` frames messages between them and ``posts`` batches the
writes of bursts of them.
"""

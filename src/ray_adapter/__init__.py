"""ray-adapter: run unmodified Ray programs on a Yuanrong runtime core.

Importing this package has no side effects. The import hook is installed by the
``ray_adapter.pth`` bootstrap when ``RAY_BACKEND=yuanrong``, by ``import ray_adapter.auto``, or
by ``ray-adapter run``.
"""

__version__ = "0.1.0"

#: The Ray release whose public API the proxy ``ray`` package mirrors.
RAY_API_VERSION = "2.60.0"

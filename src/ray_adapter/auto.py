"""``import ray_adapter.auto`` at the top of a script installs the import hook unconditionally.

The fallback for interpreters that do not process ``.pth`` files (``python -S``, ``pip install
--target`` directories, zipapps). It also sets ``RAY_BACKEND=yuanrong`` so that worker and child
processes serve the same ``ray``.
"""
import os

from ray_adapter import hook

os.environ["RAY_BACKEND"] = "yuanrong"
hook.install()

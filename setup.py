"""Build glue: ship the import-hook bootstrap files (``hooks/``) to the root of site-packages.

setuptools has no declarative way to place a file at the root of site-packages. A regular wheel
packs whatever ``build_py`` leaves at the root of ``build_lib``; a PEP 660 editable wheel does
not pack ``build_lib`` but packs the folder ``install_lib`` points to, so in editable mode the
files are written there instead.
"""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
HOOK_FILES = ("ray_adapter.pth", "ray_adapter.start")


class build_py_with_hook_files(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            target = self.get_finalized_command("install").install_lib
        else:
            target = self.build_lib
        self.mkpath(target)
        for name in HOOK_FILES:
            self.copy_file(os.path.join(HERE, "hooks", name), os.path.join(target, name))

    def get_outputs(self, include_bytecode=True):
        outputs = list(super().get_outputs(include_bytecode))
        if not getattr(self, "editable_mode", False):
            outputs += [os.path.join(self.build_lib, name) for name in HOOK_FILES]
        return outputs


setup(cmdclass={"build_py": build_py_with_hook_files})

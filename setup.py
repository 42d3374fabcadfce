"""Build glue: ship the import-hook bootstrap files into site-packages.

setuptools has no declarative way to put a file at the root of site-packages, so the files in
``hooks/`` are written there by two small command overrides: ``build_py`` (regular wheels) and
``install_data`` (which also runs for PEP 660 editable wheels, where ``build_py`` outputs are
not packed). Both target the wheel's ``purelib`` root.
"""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
HOOK_FILES = ("ray_adapter.pth", "ray_adapter.start")


class build_py_with_hook(build_py):
    def run(self):
        super().run()
        for name in HOOK_FILES:
            self.copy_file(os.path.join(HERE, "hooks", name), os.path.join(self.build_lib, name))

    def get_outputs(self, include_bytecode=1):
        return list(super().get_outputs(include_bytecode)) + [
            os.path.join(self.build_lib, name) for name in HOOK_FILES
        ]


setup(cmdclass={"build_py": build_py_with_hook})

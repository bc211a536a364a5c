"""Ships the search spaces and the examples inside the wheel, under autotune/_data/,
where autotune.resources finds them (a source checkout keeps them beside the package)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        data = Path(self.build_lib) / "autotune" / "_data"
        for folder in ("search_spaces", "examples"):
            shutil.copytree(ROOT / folder, data / folder, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildWithData})

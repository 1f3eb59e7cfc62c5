"""`pip install .`: the quiver package built by CMake, as `make python` builds it.

CMake builds in QUIVER_BUILD_DIR (default ./build/pip, a folder of its own configured
without tests or the server); QUIVER_BUILD_DIR=build reuses the folder of `make python`,
so the install only copies files. It needs what `make python` needs (cmake, ninja, g++,
the Debian -dev packages of tools/install_deps.sh, pybind11) and no network when run as
`pip install --no-build-isolation .` (pip otherwise fetches setuptools first)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class BinaryDistribution(Distribution):
    """The package holds a compiled extension, so the wheel is platform-specific."""

    def has_ext_modules(self):
        return True


class CMakeBuild(build_ext):
    """`build` runs build_ext for a distribution with extensions; here it is CMake's."""

    def run(self):
        build_dir = Path(os.environ.get("QUIVER_BUILD_DIR", ROOT / "build" / "pip")).resolve()
        configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir), f"-DPython_EXECUTABLE={sys.executable}"]
        if not (build_dir / "CMakeCache.txt").exists():
            # A fresh folder builds only the package's dependencies; an existing one keeps its settings.
            configure += ["-G", "Ninja", "-DBUILD_TESTING=OFF", "-DQUIVER_SERVER=OFF"]
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "python"], check=True)
        target = Path(self.build_lib) / "quiver"
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(build_dir / "python" / "quiver", target,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(distclass=BinaryDistribution, cmdclass={"build_ext": CMakeBuild})

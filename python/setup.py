"""Builds libflashgrad.so with the repository's Makefile (`make shared`) and puts it inside the package.

`pip install ./python` (from the repository root) runs this: the C library is compiled from the
checkout this folder sits in (the Makefile installs missing Debian packages when run as root, or
names them), then copied to flashgrad/libflashgrad.so, where the package looks for it first. The
wheel holds no Python extension: it is tagged for the platform only (py3-none-<platform>).
FLASHGRAD_CUDA=1 in the environment installs the library built with CUDA instead
(build-cuda/libflashgrad.so, which needs nvcc; flashgrad.torch then takes CUDA tensors too).
"""
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        if not os.path.exists(os.path.join(ROOT, "Makefile")):
            sys.exit("flashgrad: no Makefile in %s: build from a flashgrad checkout (pip install ./python)" % ROOT)
        jobs = os.environ.get("FG_BUILD_JOBS", str(min(os.cpu_count() or 1, 8)))
        make = os.environ.get("MAKE", "make")
        cuda = os.environ.get("FLASHGRAD_CUDA") == "1"
        try:
            subprocess.check_call([make, "-C", ROOT, "--no-print-directory", "-j" + jobs, "shared",
                                   "SHARED_CUDA=" + ("1" if cuda else "0")])
        except (OSError, subprocess.CalledProcessError) as e:
            sys.exit("flashgrad: `make shared` failed (%s)" % e)
        built = os.path.join(ROOT, "build-cuda" if cuda else "build", "libflashgrad.so")
        if not os.path.exists(built):
            sys.exit("flashgrad: FLASHGRAD_CUDA=1 but %s was not built (is nvcc on PATH?)" % built)
        dst = os.path.join(self.build_lib, "flashgrad")
        os.makedirs(dst, exist_ok=True)
        shutil.copy2(built, os.path.join(dst, "libflashgrad.so"))


class PlatformWheel(bdist_wheel):
    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": PlatformWheel})

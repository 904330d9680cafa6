"""Build memlimits' Python module against the installed C library.

The compiler and linker flags come from pkg-config (memlimits.pc), or
from MEMLIMITS_CFLAGS and MEMLIMITS_LIBS when set (the source tree's
`make` sets them to build against the uninstalled library).  Nothing is
downloaded: setuptools is the only build dependency."""
import os
import shlex
import subprocess

from setuptools import Extension, setup


def flags(var, pkg_args):
    if os.environ.get(var) is not None:
        return shlex.split(os.environ[var])
    try:
        out = subprocess.run(["pkg-config"] + pkg_args + ["memlimits"],
                             check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("memlimits: pkg-config memlimits failed (%s): "
                         "install libmemlimits first, or set %s" % (e, var))
    return shlex.split(out.stdout)


cflags = flags("MEMLIMITS_CFLAGS", ["--cflags"])
libs = flags("MEMLIMITS_LIBS", ["--libs"])

setup(
    name="memlimits",
    version="0.4.0",
    description="Memory limits per call, per block and per request",
    packages=["memlimits"],
    package_data={"memlimits": ["py.typed", "*.pyi"]},
    ext_modules=[Extension(
        "memlimits._memlimits", ["src/_memlimits.c"],
        extra_compile_args=cflags + ["-std=gnu11"],
        extra_link_args=libs)],
    python_requires=">=3.9",
)

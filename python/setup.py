"""Build memlimits' Python module against the installed C library.

The compiler and linker flags come from pkg-config (memlimits.pc), or
from MEMLIMITS_CFLAGS and MEMLIMITS_LIBS when set (the source tree's
`make` sets them to build against the uninstalled library).  Nothing is
downloaded: setuptools is the only build dependency."""
import os
import re
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


def version():
    """The one version, configure.ac's AC_INIT: from MEMLIMITS_VERSION
    (the source tree's make sets it), else ../configure.ac (pip install
    ./python in a checkout, configured or not), else the installed
    library's (pkg-config --modversion memlimits)."""
    v = os.environ.get("MEMLIMITS_VERSION")
    if v:
        return v
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(here, "..", "configure.ac")) as f:
            m = re.search(r"^AC_INIT\(\[memlimits\], *\[([^]]+)\]",
                          f.read(), re.M)
        if m:
            return m.group(1)
    except OSError:
        pass
    try:
        return subprocess.run(["pkg-config", "--modversion", "memlimits"],
                              check=True, capture_output=True,
                              text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("memlimits: no version: not in a source tree and "
                         "pkg-config memlimits failed (%s); set "
                         "MEMLIMITS_VERSION" % e)


VERSION = version()
# The module's C files (src/module.h is what they share; python/local.mk
# lists the same for make dist).
SOURCES = ["src/_memlimits.c", "src/hooks.c", "src/pymalloc.c",
           "src/guard.c", "src/task.c", "src/oldpools.c"]


def library_source():
    """The library's source tree, for its one size parser
    (lib/util/parse.c, compiled in: "1.5G" means what it means to the
    memlimits command): MEMLIMITS_SRCDIR (the source tree's make sets
    it), else the checkout this python/ is in."""
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.environ.get("MEMLIMITS_SRCDIR"), os.path.join(here, "..")):
        if d and os.path.isfile(os.path.join(d, "lib", "util", "parse.c")):
            return os.path.abspath(d)
    raise SystemExit("memlimits: lib/util/parse.c not found: build from "
                     "memlimits' source tree, or set MEMLIMITS_SRCDIR")


LIBSRC = library_source()
SOURCES.append(os.path.join(LIBSRC, "lib", "util", "parse.c"))
cflags = flags("MEMLIMITS_CFLAGS", ["--cflags"])
libs = flags("MEMLIMITS_LIBS", ["--libs"])

setup(
    name="memlimits",
    version=VERSION,
    description="Memory limits per call, per block and per request",
    packages=["memlimits"],
    package_data={"memlimits": ["py.typed", "*.pyi"]},
    ext_modules=[Extension(
        "memlimits._memlimits", SOURCES,
        depends=["src/module.h"],
        define_macros=[("ML_PY_VERSION", '"%s"' % VERSION)],
        include_dirs=[os.path.join(LIBSRC, "lib")],
        # Only PyInit__memlimits is exported (PyMODINIT_FUNC): the
        # parser's ml__ names stay the module's own.
        extra_compile_args=cflags + ["-std=gnu11", "-fvisibility=hidden"],
        extra_link_args=libs)],
    # What tests/python/test-python-versions.sh builds and tests against
    # (make check): CPython 3.9 to 3.13.  3.14 is refused until tested:
    # the module reads the thread state's exception field and pymalloc's
    # pool header as each version lays them out (src/guard.c,
    # src/pymalloc.c).
    python_requires=">=3.9, <3.14",
    classifiers=[
        "Programming Language :: Python :: 3.9",
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Programming Language :: Python :: Implementation :: CPython",
    ],
)

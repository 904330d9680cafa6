"""Build memlimits' Python module with nothing but the standard library.

One build for every way the module is made (issue 43, item 5):

* ``pip install ./python`` and ``python -m build``: this file is the
  project's PEP 517 backend (pyproject.toml, ``backend-path``), and it
  declares no build dependency, so pip has nothing to fetch: it works
  offline, in a virtualenv and without ``--no-build-isolation``.
  setuptools 66 (Debian 12) cannot make a wheel without the ``wheel``
  package, which a fresh virtualenv lacks; this backend writes the wheel
  itself (a zip file with its RECORD, PEP 427).
* ``make``: ``python3 memlimits_build.py --inplace DIR`` builds the module
  into the build tree's package (python/local.mk).
* tests/python/test-python-versions.sh: the same, for each CPython found,
  with ``--werror``.

The compiler and its flags are the interpreter's own (sysconfig's CC,
CFLAGS, CCSHARED and LDSHARED, as setuptools takes them).  The library's
flags come from MEMLIMITS_CFLAGS and MEMLIMITS_LIBS when set (the source
tree's make sets them to build against the uninstalled library), else
from ``pkg-config memlimits``.  The extension records where the library
is (a RUNPATH): MEMLIMITS_RUNPATH when set, else the -L folders of
MEMLIMITS_LIBS, else pkg-config's libdir, so that ``import memlimits``
needs neither ``ldconfig`` nor LD_LIBRARY_PATH.
"""
import base64
import glob
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "memlimits"
SUMMARY = "Memory limits per call, per block and per request"
# What tests/python/test-python-versions.sh builds and tests against (make
# check): CPython 3.9 to 3.13.  3.14 is refused until tested: the module
# reads the thread state's exception field and pymalloc's pool header as
# each version lays them out (src/guard.c, src/pymalloc.c).
REQUIRES_PYTHON = ">=3.9, <3.14"
CLASSIFIERS = ["Programming Language :: Python :: 3.%d" % m
               for m in range(9, 14)] + [
    "Programming Language :: Python :: Implementation :: CPython",
    "Operating System :: POSIX :: Linux",
]


class BuildError(Exception):
    """A build that cannot go on, with a sentence saying what to do."""


def _pkg_config(*args):
    try:
        out = subprocess.run(["pkg-config", *args, "memlimits"], check=True,
                             capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        raise BuildError(
            "memlimits: pkg-config %s memlimits failed (%s): install the C "
            "library first (./configure && make && make install; "
            "PKG_CONFIG_PATH=PREFIX/lib/pkgconfig for another prefix), or "
            "set MEMLIMITS_CFLAGS and MEMLIMITS_LIBS"
            % (" ".join(args), detail.strip())) from None
    return out.stdout.strip()


def version():
    """The one version, configure.ac's AC_INIT: from MEMLIMITS_VERSION (the
    source tree's make sets it to configure's), else ../configure.ac (a
    checkout, configured or not), else this sdist's PKG-INFO, else the
    installed library's (pkg-config --modversion)."""
    v = os.environ.get("MEMLIMITS_VERSION")
    if v:
        return v
    for path, pattern in (
            (os.path.join(HERE, "..", "configure.ac"),
             r"^AC_INIT\(\[memlimits\], *\[([^]]+)\]"),
            (os.path.join(HERE, "PKG-INFO"), r"^Version: *(\S+)")):
        try:
            with open(path) as f:
                m = re.search(pattern, f.read(), re.M)
        except OSError:
            continue
        if m:
            return m.group(1)
    return _pkg_config("--modversion")


def library_source():
    """Where lib/util/parse.c is: the library's one size parser, compiled
    into the module so that "1.5G" means what it means to the memlimits
    command.  MEMLIMITS_SRCDIR (the source tree's make sets it), else the
    checkout this python/ is in, else this sdist (which carries it)."""
    for d in (os.environ.get("MEMLIMITS_SRCDIR"), os.path.join(HERE, ".."),
              HERE):
        if d and os.path.isfile(os.path.join(d, "lib", "util", "parse.c")):
            return os.path.abspath(d)
    raise BuildError("memlimits: lib/util/parse.c not found: build from "
                     "memlimits' source tree, or set MEMLIMITS_SRCDIR")


def library_flags():
    """(compile flags, link flags, RUNPATH folders) for libmemlimits."""
    env = os.environ
    cflags = (shlex.split(env["MEMLIMITS_CFLAGS"])
              if env.get("MEMLIMITS_CFLAGS") is not None
              else shlex.split(_pkg_config("--cflags")))
    if env.get("MEMLIMITS_LIBS") is not None:
        libs = shlex.split(env["MEMLIMITS_LIBS"])
        runpath = [a[2:] for a in libs if a.startswith("-L") and a[2:]]
    else:
        libs = shlex.split(_pkg_config("--libs"))
        runpath = [_pkg_config("--variable=libdir")]
    if env.get("MEMLIMITS_RUNPATH") is not None:
        runpath = [d for d in env["MEMLIMITS_RUNPATH"].split(":") if d]
    return cflags, libs, [os.path.abspath(d) for d in runpath]


def sources():
    """The module's C files (src/module.h is what they share) and the
    library's parser.  Every src/*.c is built: there is no second list
    to keep in step (python/local.mk lists them for make dist only)."""
    files = sorted(glob.glob(os.path.join(HERE, "src", "*.c")))
    if not files:
        raise BuildError("memlimits: no src/*.c next to %s" % __file__)
    return files + [os.path.join(library_source(), "lib", "util", "parse.c")]


def extension_name():
    return "_memlimits" + sysconfig.get_config_var("EXT_SUFFIX")


def _var(name):
    return shlex.split(sysconfig.get_config_var(name) or "")


def build_extension(package_dir, werror=False, quiet=False):
    """Compile and link memlimits/_memlimits into package_dir (a folder
    holding the memlimits package).  Objects go to a temporary folder:
    nothing is written next to the sources, which may be read-only (make
    distcheck)."""
    cflags, libs, runpath = library_flags()
    v = version()
    cc = _var("CC")
    common = (_var("CFLAGS") + _var("CCSHARED") +
              ["-std=gnu11", "-fvisibility=hidden",
               "-DML_PY_VERSION=\"%s\"" % v,
               "-I" + sysconfig.get_paths()["include"],
               "-I" + sysconfig.get_paths()["platinclude"],
               "-I" + os.path.join(library_source(), "lib")] + cflags)
    if werror:
        common += ["-Wall", "-Wextra", "-Werror"]
    out = os.path.join(package_dir, "memlimits", extension_name())
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="memlimits-build.") as tmp:
        objects = []
        for i, src in enumerate(sources()):
            obj = os.path.join(tmp, "%d-%s.o" % (
                i, os.path.splitext(os.path.basename(src))[0]))
            _run(cc + common + ["-c", src, "-o", obj], quiet)
            objects.append(obj)
        # Only PyInit__memlimits is exported (PyMODINIT_FUNC): the parser's
        # ml__ names stay the module's own.  --enable-new-dtags: a RUNPATH,
        # which LD_LIBRARY_PATH may still override, not an RPATH.
        rpath = (["-Wl,--enable-new-dtags"] +
                 ["-Wl,-rpath," + d for d in runpath]) if runpath else []
        tmp_out = os.path.join(tmp, extension_name())
        _run(_var("LDSHARED") + objects + libs + rpath + ["-o", tmp_out],
             quiet)
        # Replaced whole, never rewritten in place: a running python may
        # have the old one mapped.
        shutil.move(tmp_out, out + ".new")
        os.replace(out + ".new", out)
    return out


def _run(cmd, quiet):
    if not quiet:
        print(" ".join(shlex.quote(c) for c in cmd), file=sys.stderr)
    r = subprocess.run(cmd)
    if r.returncode != 0:
        raise BuildError("memlimits: %s failed with status %d"
                         % (cmd[0], r.returncode))


# PEP 517 ------------------------------------------------------------------

def _dist_info():
    return "%s-%s.dist-info" % (NAME, version())


def _metadata():
    lines = ["Metadata-Version: 2.1", "Name: " + NAME,
             "Version: " + version(), "Summary: " + SUMMARY,
             "License: see the source distribution",
             "Requires-Python: " + REQUIRES_PYTHON]
    lines += ["Classifier: " + c for c in CLASSIFIERS]
    return "\n".join(lines) + "\n"


def _tag():
    impl = "cp%d%d" % sys.version_info[:2]
    if sys.implementation.name != "cpython":
        raise BuildError("memlimits: the module is for CPython only")
    plat = re.sub(r"[-.]", "_", sysconfig.get_platform())
    return "%s-%s%s-%s" % (impl, impl, sys.abiflags, plat)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory,
                                     config_settings=None):
    d = os.path.join(metadata_directory, _dist_info())
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write(_metadata())
    return _dist_info()


def build_wheel(wheel_directory, config_settings=None,
                metadata_directory=None):
    try:
        return _build_wheel(wheel_directory)
    except BuildError as e:
        # pip shows the message, not a traceback through this file.
        raise SystemExit(str(e)) from None


def _build_wheel(wheel_directory):
    with tempfile.TemporaryDirectory(prefix="memlimits-wheel.") as root:
        shutil.copytree(os.path.join(HERE, "memlimits"),
                        os.path.join(root, "memlimits"),
                        ignore=shutil.ignore_patterns("*.so", "__pycache__"))
        build_extension(root)
        tag = _tag()
        name = "%s-%s-%s.whl" % (NAME, version(), tag)
        files = []
        for dirpath, _, names in os.walk(os.path.join(root, "memlimits")):
            for n in sorted(names):
                p = os.path.join(dirpath, n)
                files.append((os.path.relpath(p, root), _read(p)))
        di = _dist_info()
        files.append((di + "/METADATA", _metadata().encode()))
        files.append((di + "/WHEEL", (
            "Wheel-Version: 1.0\nGenerator: memlimits_build\n"
            "Root-Is-Purelib: false\nTag: %s\n" % tag).encode()))
        record = []
        path = os.path.join(wheel_directory, name)
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
            for arc, data in files:
                z.writestr(_zipinfo(arc, 0o755 if arc.endswith(".so")
                                    else 0o644), data)
                digest = base64.urlsafe_b64encode(
                    hashlib.sha256(data).digest()).rstrip(b"=").decode()
                record.append("%s,sha256=%s,%d" % (arc, digest, len(data)))
            record.append(di + "/RECORD,,")
            z.writestr(_zipinfo(di + "/RECORD", 0o644),
                       "\n".join(record) + "\n")
    return name


def build_sdist(sdist_directory, config_settings=None):
    """python/ with the library's parser (lib/util/parse.[ch]) and a
    PKG-INFO carrying the version: what build_wheel needs, and no more."""
    base = "%s-%s" % (NAME, version())
    name = base + ".tar.gz"
    lib = library_source()
    members = [("PKG-INFO", None)]
    for rel in ("pyproject.toml", "memlimits_build.py", "README.md"):
        members.append((rel, os.path.join(HERE, rel)))
    for sub in ("src", "memlimits"):
        for p in sorted(glob.glob(os.path.join(HERE, sub, "*"))):
            if os.path.isfile(p) and not p.endswith((".so", ".pyc")):
                members.append((os.path.relpath(p, HERE), p))
    for n in ("parse.c", "parse.h"):
        members.append(("lib/util/" + n, os.path.join(lib, "lib", "util", n)))
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz",
                      format=tarfile.PAX_FORMAT) as t:
        for arc, p in members:
            if p is None:
                data = _metadata().encode()
                info = tarfile.TarInfo(base + "/" + arc)
                info.size = len(data)
                info.mode = 0o644
                t.addfile(info, io.BytesIO(data))
            else:
                t.add(p, base + "/" + arc, recursive=False)
    return name


def _read(p):
    with open(p, "rb") as f:
        return f.read()


def _zipinfo(arc, mode):
    # A fixed date: the same sources make the same wheel.
    info = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(
        prog="memlimits_build.py",
        description="Build memlimits' Python module (stdlib only).")
    ap.add_argument("--inplace", metavar="DIR",
                    help="build memlimits/_memlimits into DIR (which holds "
                         "the memlimits package)")
    ap.add_argument("--werror", action="store_true",
                    help="also -Wall -Wextra -Werror")
    ap.add_argument("--version", action="store_true",
                    help="print the version this build would give")
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    try:
        if a.version:
            print(version())
        elif a.inplace:
            build_extension(a.inplace, werror=a.werror, quiet=a.quiet)
        else:
            ap.error("say --inplace DIR or --version")
    except BuildError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A PEP 517 build backend for the asyncgate-worker package, standard
library only.

The package is two modules, each standard library only and usable alone:
asyncgate_worker.py (the worker side) and asyncgate_client.py (the agent
side). This backend writes its wheel (the modules, and a dist-info with
METADATA, WHEEL and RECORD), an
editable wheel (a .pth naming this folder) and an sdist, reading the name,
version, description and requires-python from pyproject.toml's [project]
table (simple ``key = "value"`` lines). pip runs it with nothing installed
(``requires = []``), so ``pip install ./sdk/python`` works offline.

Run as a script it builds the wheel without pip:
``python3 sdk/python/_build/asyncgate_build.py [OUTDIR]``.
"""

import base64
import hashlib
import io
import os
import re
import sys
import tarfile
import time
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = ("asyncgate_worker.py", "asyncgate_client.py")
TAG = "py3-none-any"


def _project():
    with open(os.path.join(HERE, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^\[project\]\s*$(.*?)(?=^\[|\Z)", text, re.S | re.M)
    if not m:
        raise RuntimeError("pyproject.toml has no [project] table")
    fields = dict(re.findall(r'^([A-Za-z-]+)\s*=\s*"([^"]*)"\s*$', m.group(1), re.M))
    for k in ("name", "version"):
        if k not in fields:
            raise RuntimeError("pyproject.toml's [project] has no %s" % k)
    return fields


def _dist_name(p):
    return re.sub(r"[-_.]+", "_", p["name"]).lower()


def _metadata(p):
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"]]
    if p.get("description"):
        lines.append("Summary: " + p["description"])
    if p.get("requires-python"):
        lines.append("Requires-Python: " + p["requires-python"])
    return ("\n".join(lines) + "\n").encode()


def _wheel_file():
    return ("Wheel-Version: 1.0\nGenerator: asyncgate_build\nRoot-Is-Purelib: true\nTag: %s\n" % TAG).encode()


def _write_wheel(wheel_directory, files):
    """Write a wheel of files (archive path → bytes) and its dist-info."""
    p = _project()
    base = "%s-%s" % (_dist_name(p), p["version"])
    info = base + ".dist-info/"
    files = dict(files)
    files[info + "METADATA"] = _metadata(p)
    files[info + "WHEEL"] = _wheel_file()
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(info + "RECORD,,")
    files[info + "RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = "%s-%s.whl" % (base, TAG)
    os.makedirs(wheel_directory, exist_ok=True)
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            zi = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return wheel


def _modules():
    """The modules of the wheel: archive path → bytes."""
    out = {}
    for m in MODULES:
        with open(os.path.join(HERE, m), "rb") as f:
            out[m] = f.read()
    return out


# ---- PEP 517 hooks


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _modules())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, {"asyncgate_worker_editable.pth": (HERE + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = "%s-%s" % (_dist_name(p), p["version"])
    name = base + ".tar.gz"
    os.makedirs(sdist_directory, exist_ok=True)
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        def add(arc, data):
            ti = tarfile.TarInfo(base + "/" + arc)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, int(time.time())
            tar.addfile(ti, io.BytesIO(data))
        for rel in ("pyproject.toml",) + MODULES + ("_build/asyncgate_build.py",):
            with open(os.path.join(HERE, rel), "rb") as f:
                add(rel, f.read())
        add("PKG-INFO", _metadata(p))
    return name


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "dist")
    print(os.path.join(out, build_wheel(out)))

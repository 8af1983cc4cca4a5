"""A PEP 517 / PEP 660 build backend for this one pure-Python package, standard library only.

pyproject.toml names it (backend-path = ["_build"]) and requires nothing, so pip can
build and install the package where no package index is reachable:
``pip install --no-index ./clients/python``. It reads [project] from pyproject.toml
and packs the folder named after the project (every file but caches) into a
py3-none-any wheel, an sdist, or an editable wheel (a .pth naming this folder).
Archives are reproducible: fixed order, fixed times (SOURCE_DATE_EPOCH if set).
"""

import base64
import gzip
import hashlib
import io
import os
import tarfile
import time
import zipfile

try:
    import tomllib
except ImportError:  # Python < 3.11: the package needs 3.11 anyway
    raise RuntimeError("the leasegate client needs Python 3.11 or newer") from None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SDIST_EXTRA = ("pyproject.toml", "README.md", "_build/leasegate_build.py")
SKIP_DIRS = {"__pycache__"}
SKIP_SUFFIXES = (".pyc", ".pyo")


def _project():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _names():
    """(distribution name, version, the dist-info folder's name)."""
    p = _project()
    name = p["name"].replace("-", "_")
    return name, p["version"], "%s-%s.dist-info" % (name, p["version"])


def _metadata():
    """The METADATA (PKG-INFO) text: core metadata 2.1 from [project], README as description."""
    p = _project()
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"]]
    if p.get("description"):
        lines.append("Summary: " + p["description"])
    if p.get("license", {}).get("text"):
        lines.append("License: " + p["license"]["text"])
    if p.get("requires-python"):
        lines.append("Requires-Python: " + p["requires-python"])
    lines += ["Requires-Dist: " + d for d in p.get("dependencies", [])]
    lines += ["Classifier: " + c for c in p.get("classifiers", [])]
    readme = p.get("readme")
    if not readme:
        return "\n".join(lines) + "\n"
    with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
        description = f.read()
    lines.append("Description-Content-Type: text/markdown; charset=UTF-8")
    return "\n".join(lines) + "\n\n" + description


def _package_files():
    """Paths (relative to ROOT, with /) of every file of the package folder, sorted."""
    name = _names()[0]
    found = []
    for folder, dirs, files in os.walk(os.path.join(ROOT, name)):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for file in files:
            if not file.endswith(SKIP_SUFFIXES):
                found.append(os.path.relpath(os.path.join(folder, file), ROOT).replace(os.sep, "/"))
    if not found:
        raise RuntimeError("no package folder %r beside pyproject.toml" % name)
    return sorted(found)


def _epoch():
    return int(os.environ.get("SOURCE_DATE_EPOCH", 315532800))  # 1980-01-01, the earliest a zip can hold


def _write_wheel(directory, tag, members):
    """A wheel in `directory` holding members ((path in the wheel, bytes)...) plus its
    dist-info (METADATA, WHEEL, RECORD); returns its file name."""
    name, version, dist_info = _names()
    members = list(members) + [
        (dist_info + "/METADATA", _metadata().encode("utf-8")),
        (dist_info + "/WHEEL", ("Wheel-Version: 1.0\nGenerator: leasegate_build\nRoot-Is-Purelib: true\n"
                                "Tag: %s\n" % tag).encode("ascii")),
    ]
    record = io.StringIO()
    for path, data in members:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
        record.write("%s,sha256=%s,%d\n" % (path, digest, len(data)))
    record.write(dist_info + "/RECORD,,\n")
    members.append((dist_info + "/RECORD", record.getvalue().encode("utf-8")))
    filename = "%s-%s-%s.whl" % (name, version, tag)
    stamp = time.gmtime(max(_epoch(), 315532800))[:6]
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as whl:
        for path, data in members:
            info = zipfile.ZipInfo(path, stamp)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info, data)
    return filename


def _read(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


# The hooks of PEP 517 and PEP 660 -------------------------------------------------
def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    dist_info = _names()[2]
    os.makedirs(os.path.join(metadata_directory, dist_info), exist_ok=True)
    with open(os.path.join(metadata_directory, dist_info, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata())
    return dist_info


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, "py3-none-any", ((path, _read(path)) for path in _package_files()))


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel whose .pth puts this folder on sys.path: edits take effect at once."""
    name = _names()[0]
    return _write_wheel(wheel_directory, "py3-none-any",
                        [("__editable__.%s.pth" % name, (ROOT + "\n").encode("utf-8"))])


def build_sdist(sdist_directory, config_settings=None):
    name, version, _ = _names()
    base = "%s-%s" % (name, version)
    filename = base + ".tar.gz"
    members = [(path, _read(path)) for path in sorted(set(SDIST_EXTRA) | set(_package_files()))]
    members.append(("PKG-INFO", _metadata().encode("utf-8")))
    with open(os.path.join(sdist_directory, filename), "wb") as f, \
            gzip.GzipFile(fileobj=f, mode="wb", mtime=_epoch()) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in members:
            info = tarfile.TarInfo("%s/%s" % (base, path))
            info.size = len(data)
            info.mtime = _epoch()
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return filename

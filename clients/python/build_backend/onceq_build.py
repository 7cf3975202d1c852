"""The PEP 517 build backend of the onceq package: the standard library only.

pip builds the package with this module (pyproject.toml's ``build-backend``,
found through ``backend-path``), so an offline ``pip install
--no-build-isolation ./clients/python`` needs neither setuptools nor wheel:
setuptools older than 70.1 cannot build a wheel without the ``wheel``
package, which a fresh pyenv or venv does not have.

What it writes (PEP 427 wheels, PEP 517 sdists, PEP 660 editables):
- a wheel ``onceq-<version>-py3-none-any.whl``: the ``onceq/`` package and
  ``onceq-<version>.dist-info/`` with METADATA, WHEEL and RECORD (sha256 of
  every file);
- an sdist ``onceq-<version>.tar.gz``: pyproject.toml, README.md, PKG-INFO,
  the package and this backend;
- an editable wheel: a ``.pth`` file that puts the source tree on sys.path.

Name, version, summary and Python requirement come from pyproject.toml's
``[project]`` table; the files are in a fixed order with fixed timestamps
(``SOURCE_DATE_EPOCH`` when set), so that two builds of one tree are equal.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "onceq"
BACKEND_DIR = "build_backend"
# The earliest time a zip entry can carry.
_ZIP_EPOCH = 315532800  # 1980-01-01T00:00:00Z


def _project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _timestamp() -> int:
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", _ZIP_EPOCH)), _ZIP_EPOCH)


def _dist_name(project: dict) -> str:
    return f"{project['name'].replace('-', '_')}-{project['version']}"


def _metadata(project: dict) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
    ]
    if "description" in project:
        lines.append(f"Summary: {project['description']}")
    if "requires-python" in project:
        lines.append(f"Requires-Python: {project['requires-python']}")
    lines += [f"Requires-Dist: {d}" for d in project.get("dependencies", [])]
    readme = project.get("readme")
    body = ""
    if readme:
        lines.append("Description-Content-Type: text/markdown")
        body = (ROOT / readme).read_text(encoding="utf-8")
    return "\n".join(lines) + "\n\n" + body


def _wheel_file(tag: str) -> str:
    return f"Wheel-Version: 1.0\nGenerator: onceq_build\nRoot-Is-Purelib: true\nTag: {tag}\n"


def _package_files() -> list[tuple[str, Path]]:
    """(name in the archive, path) for every file of the package, sorted."""
    out = []
    for path in sorted((ROOT / PACKAGE).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            out.append((path.relative_to(ROOT).as_posix(), path))
    return out


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def _write_wheel(directory: str, files: list[tuple[str, bytes]], project: dict) -> str:
    """Writes a py3-none-any wheel of files plus its dist-info; returns its name."""
    dist = _dist_name(project)
    tag = "py3-none-any"
    info = f"{dist}.dist-info"
    entries = list(files) + [
        (f"{info}/METADATA", _metadata(project).encode()),
        (f"{info}/WHEEL", _wheel_file(tag).encode()),
    ]
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries)
    record += f"{info}/RECORD,,\n"
    entries.append((f"{info}/RECORD", record.encode()))
    name = f"{dist}-{tag}.whl"
    stamp = time.gmtime(_timestamp())[:6]
    with zipfile.ZipFile(Path(directory) / name, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in entries:
            zi = zipfile.ZipInfo(arcname, date_time=stamp)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    return name


# ---- PEP 517 hooks -----------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = [(name, path.read_bytes()) for name, path in _package_files()]
    return _write_wheel(wheel_directory, files, _project())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # The source tree goes on sys.path: edits take effect without a rebuild.
    pth = (str(ROOT) + "\n").encode()
    return _write_wheel(wheel_directory, [(f"__editable__.{PACKAGE}.pth", pth)], _project())


def build_sdist(sdist_directory, config_settings=None):
    project = _project()
    dist = _dist_name(project)
    members: list[tuple[str, bytes]] = [
        ("PKG-INFO", _metadata(project).encode()),
        ("pyproject.toml", (ROOT / "pyproject.toml").read_bytes()),
    ]
    if project.get("readme"):
        members.append((project["readme"], (ROOT / project["readme"]).read_bytes()))
    members += [(name, path.read_bytes()) for name, path in _package_files()]
    members.append((f"{BACKEND_DIR}/onceq_build.py", Path(__file__).read_bytes()))
    name = f"{dist}.tar.gz"
    mtime = _timestamp()
    with tarfile.open(Path(sdist_directory) / name, "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for arcname, data in members:
            ti = tarfile.TarInfo(f"{dist}/{arcname}")
            ti.size = len(data)
            ti.mtime = mtime
            ti.mode = 0o644
            tf.addfile(ti, io.BytesIO(data))
    return name

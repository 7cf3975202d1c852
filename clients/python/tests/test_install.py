"""The package installs with pip from the source tree, without PyPI and
without setuptools or wheel: ``pip install --no-build-isolation`` runs the
in-tree backend (build_backend/onceq_build.py) into a fresh venv, and the
package imports from there. Checked with this interpreter (e.g. a pyenv
3.11 whose setuptools is older than 70.1 and has no wheel) and with
Debian's /usr/bin/python3 when it has pip."""

import base64
import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile

from .support import PKG_ROOT

sys.path.insert(0, str(PKG_ROOT / "build_backend"))
import onceq_build  # noqa: E402


def _interpreters():
    """This interpreter and Debian's, each once."""
    seen, out = set(), []
    for py in (sys.executable, "/usr/bin/python3"):
        if os.access(py, os.X_OK) and os.path.realpath(py) not in seen:
            seen.add(os.path.realpath(py))
            out.append(py)
    return out


class InstallTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="onceq-py-install-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        # A copy: nothing a build leaves behind lands in the source tree.
        self.src = os.path.join(self.tmp, "src")
        shutil.copytree(PKG_ROOT, self.src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))

    def _install(self, python, *extra):
        """A fresh venv without pip, filled by python's pip; returns its python."""
        venv = tempfile.mkdtemp(prefix="venv-", dir=self.tmp)
        subprocess.run([python, "-m", "venv", "--without-pip", venv], check=True, capture_output=True)
        pip = subprocess.run([python, "-m", "pip", "--python", os.path.join(venv, "bin", "python"), "install",
                              "--no-build-isolation", "--no-index", "--disable-pip-version-check", *extra, self.src],
                             capture_output=True, text=True)
        self.assertEqual(pip.returncode, 0, pip.stdout + pip.stderr)
        return venv

    def _import(self, venv):
        out = subprocess.run([os.path.join(venv, "bin", "python"), "-c",
                              "import onceq; print(onceq.__version__, onceq.__file__); onceq.Worker; onceq.Fenced"],
                             capture_output=True, text=True, cwd=self.tmp)
        self.assertEqual(out.returncode, 0, out.stderr)
        version, path = out.stdout.split()
        return version, path

    def test_pip_install_no_build_isolation(self):
        tried = 0
        for python in _interpreters():
            if subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode != 0:
                continue  # Debian's python3 without python3-pip
            tried += 1
            with self.subTest(python=python):
                venv = self._install(python)
                version, path = self._import(venv)
                self.assertEqual(version, "0.1.0")
                self.assertTrue(path.startswith(venv), path)
        if tried == 0:
            self.skipTest("no interpreter with pip")

    def test_editable_install_imports_the_source_tree(self):
        venv = self._install(sys.executable, "--editable")
        version, path = self._import(venv)
        self.assertEqual(version, "0.1.0")
        self.assertEqual(path, os.path.join(self.src, "onceq", "__init__.py"))

    def test_wheel_is_complete_and_its_record_matches(self):
        name = onceq_build.build_wheel(self.tmp)
        self.assertEqual(name, "onceq-0.1.0-py3-none-any.whl")
        with zipfile.ZipFile(os.path.join(self.tmp, name)) as zf:
            names = set(zf.namelist())
            for module in ("__init__", "_http", "client", "errors", "types", "worker"):
                self.assertIn(f"onceq/{module}.py", names)
            self.assertIn("onceq/py.typed", names)
            self.assertFalse([n for n in names if "__pycache__" in n or n.startswith("build_backend")], names)
            info = "onceq-0.1.0.dist-info"
            metadata = zf.read(f"{info}/METADATA").decode()
            self.assertIn("Name: onceq\n", metadata)
            self.assertIn("Version: 0.1.0\n", metadata)
            self.assertIn("Requires-Python: >=3.11\n", metadata)
            self.assertIn("Tag: py3-none-any\n", zf.read(f"{info}/WHEEL").decode())
            rows = list(csv.reader(io.StringIO(zf.read(f"{info}/RECORD").decode())))
            self.assertEqual({r[0] for r in rows}, names)
            for path, digest, size in rows:
                if path == f"{info}/RECORD":
                    self.assertEqual((digest, size), ("", ""))
                    continue
                data = zf.read(path)
                expect = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                self.assertEqual(digest, f"sha256={expect}", path)
                self.assertEqual(int(size), len(data), path)
        # Reproducible: a second build is the same bytes.
        again = os.path.join(self.tmp, "again")
        os.mkdir(again)
        onceq_build.build_wheel(again)
        with open(os.path.join(self.tmp, name), "rb") as a, open(os.path.join(again, name), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_sdist_builds_and_installs(self):
        name = onceq_build.build_sdist(self.tmp)
        self.assertEqual(name, "onceq-0.1.0.tar.gz")
        with tarfile.open(os.path.join(self.tmp, name)) as tf:
            names = set(tf.getnames())
            for member in ("PKG-INFO", "pyproject.toml", "README.md", "onceq/__init__.py",
                           "build_backend/onceq_build.py"):
                self.assertIn(f"onceq-0.1.0/{member}", names)
            extra = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
            tf.extractall(os.path.join(self.tmp, "sdist"), **extra)
        # What the sdist holds is enough to build and install the package.
        self.src = os.path.join(self.tmp, "sdist", "onceq-0.1.0")
        version, _ = self._import(self._install(sys.executable))
        self.assertEqual(version, "0.1.0")

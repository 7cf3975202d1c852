"""The package installs with pip from the source tree, without PyPI:
``pip install --no-build-isolation`` with the system's setuptools, in a
fresh venv, and imports from there."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from .support import PKG_ROOT

# Debian's interpreter has Debian's python3-setuptools; else this one.
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


class InstallTest(unittest.TestCase):
    def test_pip_install_no_build_isolation(self):
        probe = subprocess.run([PYTHON, "-c", "import setuptools, venv, ensurepip"], capture_output=True)
        if probe.returncode != 0:
            self.skipTest(f"{PYTHON} lacks setuptools or venv (clients/deps.sh installs them)")
        tmp = tempfile.mkdtemp(prefix="onceq-py-install-")
        self.addCleanup(shutil.rmtree, tmp, True)
        src = os.path.join(tmp, "src")  # a copy: the build leaves build/ and egg-info behind
        shutil.copytree(PKG_ROOT, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
        venv = os.path.join(tmp, "venv")
        subprocess.run([PYTHON, "-m", "venv", "--system-site-packages", venv], check=True, capture_output=True)
        pip = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--no-build-isolation", "--no-index",
                              "--disable-pip-version-check", src], capture_output=True, text=True)
        self.assertEqual(pip.returncode, 0, pip.stdout + pip.stderr)
        out = subprocess.run([os.path.join(venv, "bin", "python"), "-c",
                              "import onceq; print(onceq.__version__, onceq.__file__); onceq.Worker; onceq.Fenced"],
                             capture_output=True, text=True, cwd=tmp)
        self.assertEqual(out.returncode, 0, out.stderr)
        version, path = out.stdout.split()
        self.assertEqual(version, "0.1.0")
        self.assertTrue(path.startswith(venv), path)

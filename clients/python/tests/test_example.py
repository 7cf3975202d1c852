"""examples/payments.py runs end to end: a worker killed mid-payment, and
nobody charged twice."""

import os
import subprocess
import sys

from .support import PKG_ROOT, ServerTestCase


class ExampleTest(ServerTestCase):
    def test_payments_demo_charges_nobody_twice(self):
        env = dict(os.environ, PYTHONPATH=str(PKG_ROOT))
        out = subprocess.run([sys.executable, str(PKG_ROOT / "examples" / "payments.py"), "demo", "--url", self.server.url],
                             capture_output=True, text=True, timeout=90, env=env)
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        self.assertIn("nobody was charged twice", out.stdout)
        self.assertIn("replayed, card NOT charged again", out.stdout)

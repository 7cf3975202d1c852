"""Runs the suite (python3 tests/run.py [-k PATTERN]) and ends with one line
``python: N passed, N failed, N skipped`` for clients/test.sh."""

import logging
import os
import sys
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> int:
    sys.path.insert(0, ROOT)
    os.chdir(ROOT)
    # The workers' warnings (stale acks, nacks) are what several tests
    # provoke; the tests assert them with assertLogs. ONCEQ_TEST_LOGS=1 shows them.
    if not os.environ.get("ONCEQ_TEST_LOGS"):
        logging.getLogger("onceq").addHandler(logging.NullHandler())
    loader = unittest.TestLoader()
    if "-k" in sys.argv:
        loader.testNamePatterns = [f"*{sys.argv[sys.argv.index('-k') + 1]}*"]
    suite = loader.discover("tests", top_level_dir=ROOT)
    t0 = time.monotonic()
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    print(f"python: {passed} passed, {failed} failed, {skipped} skipped ({time.monotonic() - t0:.1f} s)")
    return 0 if result.wasSuccessful() and result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())

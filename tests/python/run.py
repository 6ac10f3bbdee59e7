#!/usr/bin/env python3
"""run.py TEST_FILE...: the Python package's tests under pytest, for CTest
(tests/cmake/python.cmake). Exit 77, which CTest reports as skipped, when
/usr/bin/python3 lacks what the tests need (NumPy, pytest) or when
every test of the file skipped (torch or the ONNX import missing: the
reasons are printed); otherwise pytest's exit status."""
import importlib.util
import sys

missing = [m for m in ("numpy", "pytest") if importlib.util.find_spec(m) is None]
if missing:
    print(f"run.py: skipped: {sys.executable} lacks {', '.join(missing)} (scripts/setup.sh installs python3-numpy and "
          "python3-pytest)")
    sys.exit(77)

import pytest  # noqa: E402


class Outcomes:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0

    def pytest_runtest_logreport(self, report):
        if report.skipped:
            self.skipped += 1
        elif report.failed:
            self.failed += 1
        elif report.when == "call":
            self.passed += 1


seen = Outcomes()
rc = pytest.main(["-q", "-rs", "-p", "no:cacheprovider", *sys.argv[1:]], plugins=[seen])
if rc == 0 and seen.passed == 0 and seen.skipped:
    print("run.py: every test skipped (reasons above)")
    sys.exit(77)
sys.exit(int(rc))

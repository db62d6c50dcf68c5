"""The test suite's own settings: a hung test fails with its traceback, in bounded time."""

import subprocess
import sys
import time
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_every_test_has_a_time_limit(pytestconfig):
    assert float(pytestconfig.getini("timeout")) > 0


def test_a_hung_test_fails_with_its_traceback(tmp_path):
    (tmp_path / "test_hang.py").write_text(
        "import time\n\ndef test_hang():\n    time.sleep(600)\n")
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(PYPROJECT), "--rootdir", str(tmp_path),
         "-p", "no:cacheprovider", "-o", "timeout=3", str(tmp_path / "test_hang.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 1, result.stdout[-3000:]
    assert time.monotonic() - started < 120
    assert "Timeout" in result.stdout and "time.sleep(600)" in result.stdout, result.stdout[-3000:]

import subprocess
import sys

import numpy as np
import pytest

from dkpca.cli import main
from dkpca.datasets import make_rings


@pytest.mark.distributed
def test_demo_writes_figure_and_prints_eigenvalues(tmp_path, capsys):
    out = tmp_path / "demo"
    status = main(["demo", "--out", str(out), "--n-samples", "400", "--workers", "1",
                   "--threads-per-worker", "2", "--quiet"])
    captured = capsys.readouterr()
    assert status == 0
    assert "eigenvalues of the centred kernel matrix" in captured.out
    assert (out / "kpca-rings.png").stat().st_size > 10_000
    assert list(out.iterdir()) == [out / "kpca-rings.png"]  # no partial file left behind


def test_user_error_is_one_line_and_status_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = subprocess.run(
        [sys.executable, "-m", "dkpca", "demo", "--out", str(blocker), "--quiet"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"dkpca: error: --out {blocker} exists and is not a folder"
    assert "Traceback" not in result.stderr and blocker.read_text() == "not a folder"


def test_bad_option_exits_2():
    result = subprocess.run(
        [sys.executable, "-m", "dkpca", "demo", "--n-samples", "-3"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 2 and "must be a positive integer" in result.stderr


def test_make_rings():
    X, labels = make_rings(301, n_rings=3, noise=0.0, n_noise_dims=2, random_state=0)
    assert X.shape == (301, 4) and np.array_equal(np.bincount(labels), [101, 100, 100])
    np.testing.assert_allclose(np.hypot(X[:, 0], X[:, 1]), labels + 1.0)
    assert np.all(X[:, 2:] == 0)
    again, _ = make_rings(301, n_rings=3, noise=0.1, random_state=0)
    np.testing.assert_array_equal(again, make_rings(301, n_rings=3, noise=0.1, random_state=0)[0])
    with pytest.raises(ValueError, match="n_samples >= n_rings"):
        make_rings(2, n_rings=3)

"""``chaos matrix --cells``: which cells a matrix runs (pure logic; the runs themselves are
tests/integration/test_chaos_matrix.py and tests/docker/test_chaos_docker.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.matrix import run_matrix
from chaos.run_dir import RunDirError


def test_an_unknown_cell_is_refused_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match="no matrix cell hard-bounce-zookeeper: the cells are"):
        run_matrix(tmp_path / "m", only=["hard-bounce-leader", "hard-bounce-zookeeper"])
    assert not (tmp_path / "m").exists()

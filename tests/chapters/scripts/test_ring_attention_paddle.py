"""ring_attention_paddle.py on 2 gloo ranks with paddle.distributed.launch: ring
attention equals full attention with and without a causal mask, and the chunk pairs
each rank computes are what the layouts promise."""
from __future__ import annotations

import pytest

from ._launch import run_script
from ._ring_checks import check_ring_run

pytestmark = pytest.mark.slow


def test_ring_equals_full_attention_and_counts_the_promised_pairs(tmp_path):
    data, log = run_script("ring_attention_paddle.py", 2, tmp_path)
    assert data["framework"] == "Paddle" and data["world"] == 2
    check_ring_run(data)
    assert "zigzag, causal: chunk pairs per rank [5, 5]" in log

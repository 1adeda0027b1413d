"""What every ring-attention run must show, whichever framework ran it."""
from __future__ import annotations

from grader.lab.planner.context import RingAttention, chunks_of, ring_pairs, ring_traffic

TOLERANCE = 1e-5      # the page's: float32, the merge sums in another order


def check_ring_run(run: dict) -> None:
    world = run["world"]
    configs = {(c["layout"], c["causal"]): c for c in run["runs"]}
    assert set(configs) == {("contiguous", False), ("contiguous", True),
                            ("zigzag", True)}
    for (layout, causal), conf in configs.items():
        ranks = sorted(conf["ranks"], key=lambda r: r["rank"])
        assert [r["rank"] for r in ranks] == list(range(world))
        # ring attention equals full attention, with and without the causal mask
        for r in ranks:
            assert r["max_diff"] <= TOLERANCE, (layout, causal, r)
        pairs = [r["pairs"] for r in ranks]
        if not causal:            # every query chunk meets every key chunk
            assert pairs == [4 * world] * world
        elif layout == "contiguous":   # rank r: r blocks in full and its own, halved
            assert pairs == [4 * r + 3 for r in range(world)]
        else:                     # zig-zag: the same on every rank
            assert pairs == [2 * world + 1] * world
        if causal:                # the causal runs skip the same pairs in both layouts
            assert sum(pairs) == world * (2 * world + 1)
        # both chunks of every rank are held once, by one rank
        held = sorted(i for r in ranks for i in r["chunks"])
        assert held == list(range(2 * world))
        # the planner's counts: pairs, chunks, and cp - 1 key/value blocks sent
        assert pairs == ring_pairs(world, layout, causal)
        sent = ring_traffic(RingAttention(run["seq"], run["heads"], run["head_dim"]),
                            world).sent
        for r in ranks:
            assert r["chunks"] == chunks_of(r["rank"], world, layout)
            assert r["sent_bytes"] == sent
        for r in ranks:
            assert len(r["busy_s"]) == len(r["wall_s"]) >= 3
            assert all(t >= 0 for t in r["busy_s"])

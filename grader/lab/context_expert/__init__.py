"""Helpers of the page "Splitting the sequence and the experts: context and expert
parallelism" (chapters/context_expert.md).

The page imports:

- from :mod:`.ring`: ``ring_rows`` (a ring-attention run's JSON as one row per rank and
  configuration), ``balance`` (how uneven the work is across ranks), ``balance_words``
  (the sentence the page prints about it, chosen from the values) and ``ring_figure``;
- from :mod:`.moe`: ``expert_load`` (tokens sent to, kept and dropped by each expert),
  ``capacity_dropped`` (the drops the capacity rule implies), ``exchange_bytes``,
  ``drop_words`` and ``load_figure``;
- from :mod:`.predict`: the planner's predictions beside the runs (``ring_predictions``,
  ``ring_table``, ``ring_words``, ``moe_predictions``, ``moe_table``, ``moe_words``,
  ``search_words``).

The lessons themselves (the ring, the online-softmax merge, the routing and the
all-to-all) are in the scripts the page shows, never here.
"""
from .moe import capacity_dropped, drop_words, exchange_bytes, expert_load, load_figure
from .predict import (moe_predictions, moe_table, moe_words, ring_predictions,
                      ring_table, ring_words, search_words)
from .ring import RingRow, balance, balance_words, ring_figure, ring_rows

__all__ = ["RingRow", "ring_rows", "balance", "balance_words", "ring_figure",
           "expert_load", "capacity_dropped", "exchange_bytes", "drop_words",
           "load_figure", "ring_predictions", "ring_table", "ring_words",
           "moe_predictions", "moe_table", "moe_words", "search_words"]

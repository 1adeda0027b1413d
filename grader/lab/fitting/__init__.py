"""Helpers of the fitting chapter (``chapters/fitting.md``: activation memory,
recomputation and mixed precision). The page imports :mod:`.breakdown` (the saved
tensors it counted, sorted into the formula's terms), :mod:`.figures` (memory over a
step, per-layer bars beside the model states, the recomputation trade-off, loss curves)
and :mod:`.words` (the sentences its measurements choose). None of them predicts a
block's bytes from its shapes: the page's cells show that formula."""

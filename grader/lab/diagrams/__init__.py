"""Diagrams the chapters draw where a reader would rather look than read, each from the
code or data the page teaches (issue 38, item 7):

- :mod:`.fg`: Megatron's f/g split of an MLP over tensor-parallel ranks
  (chapters/tensor_parallel.md);
- :mod:`.ring`: the ring-attention steps under the causal mask, contiguous and
  zig-zag (chapters/context_expert.md);
- :mod:`.moe`: a mixture of experts' dispatch buffer, drops and all-to-all
  (chapters/context_expert.md);
- :mod:`.zero`: ZeRO's stages as the planner's memory bars (chapters/sharding.md);
- :mod:`.mesh`: the capstone's mesh, each rank in its cell, and the function that owns
  each dimension (chapters/capstone.md).

They are framework-neutral (matplotlib only; no framework is imported to draw), and
each draws the parts of its data with a ``gid`` (:mod:`.draw`), which
tests/lab/diagrams reads back and compares with the scripts and the planner.
"""
from .fg import OPERATORS, fg_diagram, mlp_shards
from .mesh import OWNERS, group_of, mesh_diagram, mesh_ranks
from .moe import dispatch_plan, moe_diagram, received
from .ring import ring_blocks, ring_diagram, token_mask
from .zero import zero_bars, zero_diagram

__all__ = ["OPERATORS", "fg_diagram", "mlp_shards", "OWNERS", "group_of", "mesh_diagram",
           "mesh_ranks", "dispatch_plan", "moe_diagram", "received", "ring_blocks",
           "ring_diagram", "token_mask", "zero_bars", "zero_diagram"]

"""The scale page (chapters/scale.md): layouts of 64 to 512 ranks predicted by the
planner and checked without a cluster, by PyTorch's own accounting of one rank's step
on a fake process group (:mod:`.fake`), set side by side (:mod:`.compare`)."""
from .fake import KINDS, TORCH_VERSION, Tracked, capstone_script, release, track

__all__ = ["KINDS", "TORCH_VERSION", "Tracked", "capstone_script", "release", "track"]

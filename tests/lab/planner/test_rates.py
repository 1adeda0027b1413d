"""The planner's one rate model (grader/lab/planner/rates.py): peak per precision x an
achievable fraction, read the same way by every planner module."""
import re
from pathlib import Path

import pytest

from grader.lab import planner as P
from grader.lab.planner import rates as R
from grader.lab.planner.cluster import calibrated_cluster, with_devices

GPU = with_devices(P.PRESETS["8 GPUs NVLink"], 1)
SIZES = dict(vocab=1000, width=256, heads=4, blocks=2, seq=128, batch=4)


def test_a_rate_is_the_precisions_peak_times_the_achievable_fraction():
    half = R.Rates("X", {"fp32": 20e12, "bf16": 300e12}, 0.5, "stated")
    assert half.rate("fp32") == 10e12 and half.rate("bf16") == 150e12
    with pytest.raises(ValueError, match="X has no FP8 rate"):
        half.rate("fp8")
    with pytest.raises(ValueError, match="unknown precision 'int4'"):
        half.rate("int4")
    with pytest.raises(ValueError, match="fraction of the peak"):
        R.Rates("X", {"fp32": 1.0}, 1.5)
    m = R.measured("GPU", "bf16", 200e12, 400e12)
    assert m.achievable == 0.5 and m.rate("bf16") == 200e12 and "measured" in m.source


def test_the_a100_preset_states_its_peaks_and_fraction():
    assert GPU.rates is R.A100 and "stated" in R.A100.source
    assert R.compute_rate(GPU, "fp32") == 19.5e12 * R.A100.achievable
    assert R.compute_rate(GPU, "tf32") == 156e12 * R.A100.achievable
    assert R.compute_rate(GPU, "bf16") == R.compute_rate(GPU, "fp16") == GPU.bf16_flops
    assert R.precision_of(4) == "fp32" and R.precision_of(4, tf32=True) == "tf32"
    assert R.precision_of(2) == "bf16" and R.precision_of(1) == "fp8"


def test_a_cluster_measured_here_has_one_rate_in_every_precision():
    here = calibrated_cluster(2, 13e9, 1e9, 1e-4, 2**40)
    assert {R.compute_rate(here, p) for p in R.PRECISIONS} == {13e9}


def test_16_bit_work_is_priced_at_the_16_bit_rate_by_every_planner_module():
    """The review found the mesh planner pricing 16-bit work at the FP32 rate while the
    fitting planner used BF16's: the same step now costs the same compute everywhere."""
    half = P.Transformer(**SIZES, itemsize=2)
    full = P.Transformer(**SIZES, itemsize=4)
    bf16 = half.flops_per_token() * half.seq * half.batch / GPU.bf16_flops
    mesh = P.predict_mesh(half, P.MeshPlan(), GPU).terms["compute"]
    sharded = P.predict_plan(half, P.Plan(), GPU).terms["compute"]
    fitted = P.predict_fitted(full, P.Plan(), GPU, P.Knobs("bf16", "none")).step_s
    assert mesh == pytest.approx(bf16) and sharded == pytest.approx(bf16)
    assert fitted == pytest.approx(bf16)
    fp32 = P.predict_plan(full, P.Plan(), GPU).terms["compute"]
    assert fp32 == pytest.approx(bf16 * GPU.bf16_flops / GPU.flops)


def test_no_planner_module_reads_a_clusters_rate_but_the_rate_model():
    """One place: a module that divides by ``cluster.flops`` itself prices work in a
    precision of its own choosing."""
    folder = Path(R.__file__).parent
    readers = {p.name for p in folder.glob("*.py") if p.name not in ("rates.py", "cluster.py")
               and re.search(r"cluster\.(bf16_)?flops\b", p.read_text())}
    assert readers == set()

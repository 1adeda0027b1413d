import pytest

from grader.lab.multidevice import split_verdict, two_devices_verdict


@pytest.mark.parametrize("alone, both, verdict", [
    ([1.0, 1.0], 1.05, "worked at the same time."),       # 1.90x of an ideal 2.0
    ([1.0, 1.0], 1.4, "each went slower beside the other"),  # 1.43x
    ([1.0, 1.0], 2.1, "gained little or nothing"),        # 0.95x
    ([0.2, 1.0], 1.0, "worked at the same time."),        # unequal devices: ideal 1.2x
    ([1.0, 0.6], 0.87, "more than the ideal"),            # 1.84x of an ideal 1.6x
])
def test_the_two_devices_verdict_is_chosen_by_the_measured_speedup(alone, both, verdict):
    text = two_devices_verdict(alone, both)
    assert verdict in text
    speedup, ideal = sum(alone) / both, sum(alone) / max(alone)
    assert f"{speedup:.2f}x as fast" in text and f"ideal of {ideal:.2f}x" in text


def test_the_two_devices_verdict_never_claims_more_than_the_figures():
    # a 0.81x run (slower together) must not read as parallel work
    text = two_devices_verdict([0.5, 0.5], 1.0 / 0.81)
    assert "gained little or nothing" in text and "worked at the same time" not in text


def test_times_must_be_positive():
    with pytest.raises(ValueError):
        two_devices_verdict([], 1.0)
    with pytest.raises(ValueError):
        split_verdict(0.0, 1.0)


@pytest.mark.parametrize("one, two, words", [(2.0, 1.0, "were faster; this run does not say"),
                                             (1.0, 1.05, "were no faster"),
                                             # the build's 1.12x is not "nothing"
                                             (99.0, 88.2, "gained little"),
                                             (1.0, 2.0, "were slower"),
                                             (14.6, 1.0, "than sharing the work can")])
def test_the_split_verdict_follows_the_ratio(one, two, words):
    text = split_verdict(one, two, "two streams")
    assert text.startswith(f"{one / two:.2f}x as fast with two streams") and words in text


def test_a_split_far_beyond_two_queues_is_not_explained_by_idle_hardware():
    # 14.6x with two one-core workers: no idle core explains that
    text = split_verdict(0.7274, 0.0498, "two workers")
    assert "idle" not in text and "at most 2x" in text


CAUSES = ("kept the hardware busy", "kept most of the hardware busy", "too small",
          "got in each other's way", "was not its arithmetic", "held each other back",
          "found work", "left undone", "filled")


@pytest.mark.parametrize("one, two", [(99.0, 88.2), (1.0, 1.05), (1.0, 2.0), (1.0, 0.98),
                                      (2.0, 1.0)])
def test_without_a_measured_peak_the_split_verdict_names_no_cause(one, two):
    text = split_verdict(one, two, "two streams", flops=2 * 64**3 * 2000)
    assert not [c for c in CAUSES if c in text], text
    assert "does not say why" in text


def test_a_launch_bound_gpu_run_is_not_called_busy():
    """The H200's record (issue 24): 2000 products of 64 x 64 at about 22 us each, one
    stream against two 0.98x-1.03x. At ~0.02 TFLOP/s against a measured peak of tens of
    TFLOP/s the GPU was idle: the sentence may say so, never that it was busy."""
    flops = 2 * 64**3 * 2000
    one = 2000 * 22e-6
    text = split_verdict(one, one / 1.01, "two streams", flops=flops, peak=38e12)
    assert "busy" not in text.replace("left most of the hardware idle", "")
    assert "left most of the hardware idle" in text and "23.8 GFLOP/s" in text
    assert "0.063% of the measured peak" in text
    faster = split_verdict(one, one / 1.5, "two streams", flops=flops, peak=38e12)
    assert "were faster: one at a time left much of the hardware idle" in faster
    busy = split_verdict(1.0, 0.98, "two streams", flops=30e12, peak=38e12)
    assert "already kept the hardware busy" in busy and "79% of the measured peak" in busy


def test_the_two_devices_verdict_names_no_shared_resource_it_did_not_measure():
    for both in (1.4, 2.1):
        text = two_devices_verdict([1.0, 1.0], both)
        assert "share" not in text and "does not say" in text

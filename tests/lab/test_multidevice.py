import pytest

from grader.lab.multidevice import split_verdict, two_devices_verdict


@pytest.mark.parametrize("alone, both, verdict", [
    ([1.0, 1.0], 1.05, "worked at the same time."),       # 1.90x of an ideal 2.0
    ([1.0, 1.0], 1.4, "held each other back"),            # 1.43x
    ([1.0, 1.0], 2.1, "hardly worked at the same time"),  # 0.95x
    ([0.2, 1.0], 1.0, "worked at the same time."),        # unequal devices: ideal 1.2x
])
def test_the_two_devices_verdict_is_chosen_by_the_measured_speedup(alone, both, verdict):
    text = two_devices_verdict(alone, both)
    assert verdict in text
    speedup, ideal = sum(alone) / both, sum(alone) / max(alone)
    assert f"{speedup:.2f}x as fast" in text and f"ideal of {ideal:.2f}x" in text


def test_the_two_devices_verdict_never_claims_more_than_the_figures():
    # a 0.81x run (slower together) must not read as parallel work
    assert "hardly" in two_devices_verdict([0.5, 0.5], 1.0 / 0.81)


def test_times_must_be_positive():
    with pytest.raises(ValueError):
        two_devices_verdict([], 1.0)
    with pytest.raises(ValueError):
        split_verdict(0.0, 1.0)


@pytest.mark.parametrize("one, two, words", [(2.0, 1.0, "were faster"),
                                             (1.0, 1.05, "gained nothing"),
                                             (1.0, 2.0, "were slower")])
def test_the_split_verdict_follows_the_ratio(one, two, words):
    text = split_verdict(one, two, "two streams")
    assert text.startswith(f"{one / two:.2f}x as fast with two streams") and words in text

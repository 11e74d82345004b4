"""The measuring and image helpers the chapters print with."""

import numpy as np
import pytest
import torch

from tritonbook import images, measure


def test_parity_finds_the_largest_difference_and_counts_like_assert_close():
    expected = torch.zeros(2, 3)
    actual = expected.clone()
    actual[1, 2] = 3e-4
    actual[0, 1] = 2e-5
    report = measure.parity(actual, expected, rtol=1e-5, atol=1e-5)
    assert report.index == (1, 2) and report.max_abs == pytest.approx(3e-4)
    assert report.n_exceeding == 2 and report.numel == 6 and not report.ok
    assert "2 of 6 elements exceed" in str(report)
    assert measure.parity(expected, expected).ok
    with pytest.raises(AssertionError):  # the same rule as torch's own check
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def test_parity_refuses_different_shapes():
    with pytest.raises(ValueError, match="shapes differ"):
        measure.parity(torch.zeros(2), torch.zeros(3))


def test_timing_reports_median_and_quartiles():
    calls = []
    timing = measure.time_call(lambda: calls.append(1), "noop", repeats=7, warmup=2, setting="CPU")
    assert len(calls) == 9 and len(timing.seconds) == 7
    q1, q3 = timing.quartiles
    assert q1 <= timing.median <= q3
    assert "7 repeats, CPU" in str(timing)
    table = measure.timing_table([timing, measure.Timing("twice", tuple(2 * s for s in timing.seconds))])
    assert table.loc["twice"].iloc[-1] == pytest.approx(2.0)
    with pytest.raises(ValueError):
        measure.time_call(lambda: None, "never", repeats=0)


def test_face_round_trip():
    face = images.load_face(256)
    assert face.shape == (256, 256, 3) and face.dtype == np.uint8
    tensor = images.to_tensor(face)
    assert tensor.shape == (1, 3, 256, 256) and -1 <= tensor.min() and tensor.max() <= 1
    assert tensor.is_contiguous()
    assert np.array_equal(images.to_image(tensor), face)
    assert images.load_face(512).shape == (512, 512, 3)
    with pytest.raises(FileNotFoundError, match="sizes available: \\[256, 512\\]"):
        images.load_face(128)
    with pytest.raises(ValueError, match="RGB uint8"):
        images.to_tensor(face.astype(np.float32))

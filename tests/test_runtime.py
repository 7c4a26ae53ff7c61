"""Shared run-time helpers: the benchmark timer and device resolution."""

import pytest

from companion import runtime


def test_median_time_is_the_median_of_the_timed_calls_after_warmup() -> None:
    readings = iter([0.0, 3.0, 10.0, 11.0, 20.0, 22.0])  # timed calls last 3, 1 and 2 clock units
    calls = []
    assert runtime.median_time(lambda: calls.append(1), 3, warmup=2, clock=lambda: next(readings)) == 2.0
    assert len(calls) == 5


def test_median_time_refuses_zero_repeats() -> None:
    with pytest.raises(ValueError, match="repeats"):
        runtime.median_time(lambda: None, 0)


def test_cuda_without_a_device_is_a_clear_error() -> None:
    if runtime.torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(RuntimeError, match="device='cuda'"):
        runtime.resolve_device("cuda")
    assert str(runtime.resolve_device("auto")) == "cpu"

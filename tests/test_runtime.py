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


def test_importing_plotting_leaves_the_matplotlib_backend_alone() -> None:
    import importlib

    import matplotlib

    from companion import plotting

    before = matplotlib.get_backend()
    matplotlib.use("svg")  # a backend the user chose (a kernel's is %matplotlib inline)
    try:
        importlib.reload(plotting)
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(before)


def test_figures_of_the_plot_helpers_are_not_kept_by_pyplot_and_still_render(tmp_path) -> None:
    import matplotlib.pyplot as plt
    import pandas as pd
    from IPython.core.pylabtools import print_figure

    from companion import plotting, sweep

    plt.close("all")
    fig, (ax,) = plotting.figure()
    plotting.mean_sd_line(ax, [0, 1, 2], [[1, 2, 3], [2, 3, 4]], "runs")
    table = pd.DataFrame({"steps": [1, 2], "claim": ["c", "c"], "value": [0.5, 0.6], "lo": [0.4, 0.5],
                          "hi": [0.6, 0.7], "threshold": [0.55, 0.55]})
    sweep.plot(table, "steps", tmp_path / "sweep.png")
    assert plt.get_fignums() == []  # pyplot would keep every one until closed
    assert print_figure(fig, "png")[:4] == b"\x89PNG"  # what a notebook cell ending in `fig` shows
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"

"""Panel titles fit their figure: a title that would run past a narrow panel puts its key on a second line
(analysis.labels.metric_title), so every title of a run's metrics figure lies inside the figure and no two titles
of a row overlap, measured on the drawn figure."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import p2pfl
from analysis.labels import ONE_LINE_TITLE, metric_title
from analysis.metric_plots import metrics_figure
from analysis.runs import load_run


def test_a_long_title_puts_its_key_on_a_second_line() -> None:
    assert metric_title("test_acc") == "test accuracy (test_acc)"
    assert metric_title("drift_to_neighbours") == "distance to neighbours\n(drift_to_neighbours)"
    assert metric_title("no_such_metric") == "no_such_metric"
    assert all(len(line) <= ONE_LINE_TITLE or "(" not in line for line in metric_title("zeta2").splitlines())


def test_every_title_of_the_metrics_figure_lies_inside_it_and_apart(tmp_path: Path) -> None:
    run = p2pfl.simulate(algorithm="fedavg", dataset="synthetic", model="mlp", peers=4, rounds=2, eval_every=1,
                         train_subset=64, batch_size=16, local_steps=1, out=str(tmp_path), progress=False,
                         plots=False, quiet=True)
    fig = metrics_figure(load_run(run.path))
    assert fig is not None
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = [ax.title.get_window_extent(renderer) for ax in fig.axes if ax.get_title()]
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert any("drift_to_neighbours" in t for t in titles)  # the longest key is among them
    for box, title in zip(boxes, titles):
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1, title
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            same_row = a.y0 < b.y1 and b.y0 < a.y1
            assert not (same_row and a.x0 < b.x1 and b.x0 < a.x1), (a, b)

"""The figures' rules (issue 43), checked on the data drawn and the files written, not on pixels: the formats of
--plot-format, text colour from the background's luminance, a regular graph's degenerate plots, exact zeros on a
log axis, spreads over fewer than 3 seeds, titles and y labels from the one table, the compact run table."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_analysis import make_run, table_rows

from analysis import load_run
from analysis.intervals import MIN_CI_SEEDS
from analysis.labels import QUANTITIES, axis_label, metric_range
from analysis.plots import plot_consensus, plot_partition, plot_run, plot_topology
from analysis.report import runs_table
from analysis.study import mean_ci
from analysis.study_plots import spread
from analysis.style import contrast_text, plot_formats, saved_files
from p2pfl.config import ConfigError, make_config, validate


def drawn(plot, run, monkeypatch, tmp_path):
    """The figure a plot function of analysis.plots builds, kept instead of saved."""
    import analysis.plots as plots

    captured = []
    monkeypatch.setattr(plots, "save", lambda fig, path: captured.append(fig) or path)
    plot(run, tmp_path)
    (fig,) = captured
    return fig


@pytest.mark.parametrize("colour, text", [
    ("white", "black"), ("black", "white"), ("#F0E442", "black"),  # the palette's yellow: black reads on it
    ("#FDE725", "black"), ("#440154", "white"),  # viridis's ends: yellow and deep purple
    ("#f7fbff", "black"), ("#08306b", "white"),  # Blues' ends: the partition map's lightest and darkest cells
    ((0.5, 0.5, 0.5, 1.0), "black"), ((0.4, 0.4, 0.4), "white"),  # the crossover lies at L = 0.179 (grey 0.46)
])
def test_text_colour_is_the_one_that_contrasts_more(colour, text):
    from matplotlib.colors import to_rgb

    def lum(rgb):
        c = [v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4 for v in rgb]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]

    L = lum(to_rgb(colour))
    against_black, against_white = (L + 0.05) / 0.05, 1.05 / (L + 0.05)  # WCAG contrast ratios
    assert contrast_text(colour) == ("black" if against_black > against_white else "white") == text


def test_partition_counts_are_black_on_light_cells_and_white_on_dark(tmp_path, monkeypatch):
    run = load_run(make_run(tmp_path, "r", rounds=2))
    counts = np.asarray(run.class_counts, dtype=float)
    ax = drawn(plot_partition, run, monkeypatch, tmp_path).axes[0]
    image = ax.get_images()[0]
    texts = {(int(t.get_position()[1]), int(t.get_position()[0])): t for t in ax.texts}
    assert len(texts) == counts.size
    for (i, j), t in texts.items():
        assert t.get_text() == str(int(counts[i, j]))
        assert t.get_color() == contrast_text(image.cmap(image.norm(counts[i, j])))
    colours = {t.get_color() for t in texts.values()}
    assert colours == {"black", "white"}  # this map's counts span light and dark cells


def test_topology_node_labels_read_on_their_nodes(tmp_path, monkeypatch):
    run = load_run(make_run(tmp_path, "folder-name", rounds=2, topology="star", k=6))
    ax = drawn(plot_topology, run, monkeypatch, tmp_path).axes[0]
    nodes = ax.collections[-1] if ax.collections[-1].get_array() is not None else ax.collections[0]
    fills = nodes.to_rgba(nodes.get_array())
    labels = sorted((t for t in ax.texts if t.get_text().isdigit()), key=lambda t: int(t.get_text()))
    assert [t.get_text() for t in labels] == [str(i) for i in range(6)]
    assert [t.get_color() for t in labels] == [contrast_text(f) for f in fills]
    assert ax.get_title().startswith("dec-ssl on star, 6 peers") and "folder-name" not in ax.get_title()


def test_plot_formats_write_each_file_in_each_format(tmp_path):
    path = make_run(tmp_path, "r", rounds=3)
    written = plot_run(path, tmp_path / "out", formats="png,pdf,svg")
    stems = {p.stem for p in written}
    assert {(p.stem, p.suffix) for p in written} == {(s, f) for s in stems for f in (".png", ".pdf", ".svg")}
    for p in written:
        head = p.read_bytes()[:64]
        assert head.startswith({".png": b"\x89PNG", ".pdf": b"%PDF-", ".svg": b"<?xml"}[p.suffix]), p
    assert sorted(written) == sorted((tmp_path / "out").iterdir())
    # the run's own --plot-format is the default
    cfg_path = make_run(tmp_path, "s", rounds=3)
    (cfg_path / "config.yaml").write_text((cfg_path / "config.yaml").read_text() + "plot_format: svg\n")
    assert {p.suffix for p in plot_run(cfg_path, tmp_path / "svg")} == {".svg"}
    with plot_formats("pdf"):
        assert saved_files(Path("a/metrics.png")) == [Path("a/metrics.pdf")]
    assert saved_files(Path("a/metrics.png")) == [Path("a/metrics.png")]  # the block's formats end with it


def test_a_bad_plot_format_is_refused_before_the_run():
    with pytest.raises(ConfigError, match=r"^--plot-format: unknown format 'gif'; allowed: png, pdf, svg"):
        validate(make_config(algorithm="consensus", peers=4, plot_format="png,gif"))
    validate(make_config(algorithm="consensus", peers=4, plot_format="pdf, svg"))


def test_a_regular_graph_draws_no_degree_plot_and_an_irregular_one_does(tmp_path):
    cycle = make_run(tmp_path, "cycle", rounds=2, topology="cycle")
    assert "per_peer_degree.png" not in {p.name for p in plot_run(cycle)}
    star = make_run(tmp_path, "star", rounds=2, topology="star")
    run = load_run(star)
    degrees = run.mean_degree()
    assert len(set(degrees.values())) == 1  # the synthetic records give every peer degree 2 ...
    metrics = (star / "metrics.jsonl").read_text().replace('"degree": {"0": 2', '"degree": {"0": 3')
    (star / "metrics.jsonl").write_text(metrics)  # ... but the star's hub has more
    assert "per_peer_degree.png" in {p.name for p in plot_run(star)}


def test_exact_consensus_is_marked_not_dropped(tmp_path, monkeypatch):
    path = make_run(tmp_path, "r", rounds=3)
    lines = (path / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    for r in records:
        if r["type"] == "round" and r["round"] >= 2:
            r["consensus_distance"] = 0.0
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    ax = drawn(plot_consensus, load_run(path), monkeypatch, tmp_path).axes[0]
    assert ax.get_yscale() == "log"
    (line,) = [x for x in ax.get_lines() if x.get_label() == "measured"]
    assert list(line.get_xdata()) == [0.0, 1.0]
    (zeros,) = [c for c in ax.collections if c.get_label().startswith("exactly 0")]
    assert [float(x) for x, _ in zeros.get_offsets()] == [2.0, 3.0]
    assert ax.get_xlim()[1] > 3.0  # the zeros' rounds are inside the panel


@pytest.mark.parametrize("values", [[0.1, 0.9], [0.98, 0.99, 0.2], [0.5], [0.3, 0.35, 0.4, 0.45]])
def test_spread_is_a_t_interval_from_three_seeds_and_min_max_below_clipped_to_the_range(values):
    iv = spread(values, "test_acc_avg")
    assert iv.value == pytest.approx(np.mean(values)) and iv.n == len(values)
    if len(values) == 1:
        assert iv.low is None and iv.high is None
    elif len(values) < MIN_CI_SEEDS:
        assert (iv.low, iv.high) == (min(values), max(values))
    else:
        t = mean_ci(values)
        assert iv.low == pytest.approx(max(t.low, 0.0)) and iv.high == pytest.approx(min(t.high, 1.0))
    assert 0.0 <= (iv.low if iv.low is not None else 0.0) and (iv.high if iv.high is not None else 1.0) <= 1.0
    # the one that t alone leaves outside [0, 1]: 3 seeds at 0.98, 0.99, 0.2 reach above 1 and below 0
    if values == [0.98, 0.99, 0.2]:
        t = mean_ci(values)
        assert t.low < 0 and t.high > 1 and (iv.low, iv.high) == (0.0, 1.0)


def test_labels_and_ranges_come_from_the_one_table():
    assert axis_label("test_acc_avg") == "test accuracy, network average (fraction correct)"
    assert axis_label("test_acc_peer_mean", "final ") == "final test accuracy, peers' mean (fraction correct)"
    assert axis_label("loss_mean") == "training loss"
    assert axis_label("my_metric_avg") == "my_metric, network average"
    assert metric_range("probe_acc_peer_min") == (0.0, 1.0) and metric_range("my_metric") == (None, None)
    assert all(q.low is None or q.high is None or q.low < q.high for q in QUANTITIES.values())


def test_the_run_table_is_compact_or_chosen_or_transposed(tmp_path):
    metrics = lambda t: {"test_acc_avg": 0.5, "test_acc_peer_mean": 0.4, "test_acc_peer_min": 0.3,  # noqa: E731
                         "test_acc_peer_max": 0.45, "test_acc_untrained": 0.1, "peers_scored": 4, "zeta2": 1.5}
    run = load_run(make_run(tmp_path, "a", rounds=2, eval_metrics=metrics))
    header = [h.strip() for h in table_rows(runs_table([run]))[0]]
    assert header[6:-2] == ["test_acc_avg", "test_acc_peer_mean", "zeta2"]  # no min, max, untrained, bookkeeping
    header = [h.strip() for h in table_rows(runs_table([run], ["test_acc_peer_min"]))[0]]
    assert header[6:-2] == ["test_acc_peer_min"]
    rows = table_rows(runs_table([run], transpose=True), "field")
    assert [h.strip() for h in rows[0]] == ["field", "a"]
    fields = {r[0]: r[1] for r in rows[1:]}
    assert fields["test_acc_avg"] == "0.5" and fields["algorithm"] == "dec-ssl" and fields["rounds"] == "2"

"""analysis.frontier on a tiny synthetic study folder: known bytes and accuracies, hand-computed intervals."""
from __future__ import annotations

import csv
import json
import math
import statistics
from pathlib import Path

import pytest

from analysis.frontier import main as frontier_main

T_975_DF2 = 4.302653  # t_{0.975, 2}, from tables
PEERS, ROUNDS = 4, 5
#: codec -> (bytes_sent per round, all peers; final accuracy per seed); sign's seed 1 diverges.
ARMS = {"dense": (1000, [0.80, 0.82, 0.84]), "top-k-0.1": (100, [0.81, 0.79, 0.83]),
        "top-k-0.01": (10, [0.70, 0.71, 0.72]), "sign": (50, [0.74, 0.78, 0.76]),
        "big": (2000, [0.95, 0.96, 0.97])}
VERDICTS = {"dense": "within", "top-k-0.1": "within", "top-k-0.01": "below", "sign": "overlaps", "big": "above"}
SEEDS = (1, 2, 3)


def write_run(folder: Path, per_round: int, acc: float, diverge: bool) -> None:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(f"algorithm: fedavg\ntopology: cycle\npeers: {PEERS}\nrounds: {ROUNDS}\n")
    records = [{"type": "round", "round": 0, "elapsed_s": 0.0}]
    for t in range(1, ROUNDS + 1):
        records.append({"type": "round", "round": t, "elapsed_s": float(t), "active": list(range(PEERS)),
                        "loss_mean": None if diverge and t == ROUNDS else 1.0 / t, "bytes_sent": per_round,
                        "bytes_sent_per_peer": {str(p): per_round // PEERS for p in range(PEERS)}})
    records.append({"type": "eval", "round": ROUNDS, "metrics": {"test_acc_avg": acc}, "per_peer": {}})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (folder / "summary.json").write_text(json.dumps({"wall_s": 1.0, "final": {"test_acc_avg": acc}}))


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("frontier-study")
    points = []
    for codec, (per_round, accs) in ARMS.items():
        for seed, acc in zip(SEEDS, accs):
            name = f"codec-{codec}__seed-{seed}"
            points.append({"name": name, "axes": {"codec": codec, "seed": str(seed)}, "options": {}})
            write_run(root / "runs" / name, per_round, acc, diverge=codec == "sign" and seed == 1)
    (root / "plan.json").write_text(json.dumps({"name": "tiny", "axes": ["codec", "seed"], "points": points}))
    return root


def t_interval(values: list[float]) -> tuple[float, float]:
    return statistics.mean(values), T_975_DF2 * statistics.stdev(values) / math.sqrt(len(values))


def test_frontier_table(study, tmp_path, capsys):
    out = tmp_path / "out"
    assert frontier_main([str(study), "--out", str(out)]) == 0
    with open(out / "frontier.csv", newline="") as fh:
        rows = {r["codec"]: r for r in csv.DictReader(fh)}
    assert set(rows) == set(ARMS)
    for codec, (per_round, accs) in ARMS.items():
        row = rows[codec]
        mean, half = t_interval(accs)
        assert float(row["test_acc_avg_mean"]) == pytest.approx(mean, abs=1e-12)
        assert float(row["test_acc_avg_low"]) == pytest.approx(mean - half, rel=1e-6)
        assert float(row["test_acc_avg_high"]) == pytest.approx(mean + half, rel=1e-6)
        assert (row["test_acc_avg_n"], row["test_acc_avg_interval"]) == ("3", "t 95% CI")
        assert float(row["total_bytes_mean"]) == per_round * ROUNDS
        assert float(row["bytes_per_peer_round_mean"]) == per_round / PEERS
        assert float(row["bytes_ratio_to_reference"]) == pytest.approx(ARMS["dense"][0] / per_round)
        assert row["verdict"] == VERDICTS[codec], codec
        assert row["n"] == "3"
        assert row["diverged"] == ("1" if codec == "sign" else "0")
        assert row["reference"] == ("1" if codec == "dense" else "0")
    md = (out / "frontier.md").read_text()
    assert str(study) in md and "test_acc_avg" in md and "Rule: " in md
    assert "- ≥10× fewer bytes and within: codec=top-k-0.1" in md  # top-k-0.01 is 100× fewer but below
    assert "- ≥100× fewer bytes and within: none" in md
    assert "1/3 diverged" in md
    assert (out / "frontier.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_reference_option_and_errors(study, tmp_path, capsys):
    out = tmp_path / "ref"
    assert frontier_main([str(study), "--reference", "top-k-0.1", "--out", str(out)]) == 0
    with open(out / "frontier.csv", newline="") as fh:
        rows = {r["codec"]: r for r in csv.DictReader(fh)}
    assert float(rows["top-k-0.01"]["bytes_ratio_to_reference"]) == pytest.approx(10.0)
    assert rows["dense"]["verdict"] == "within"  # 0.82 in 0.81 ± 0.0497
    assert frontier_main([str(study), "--reference", "nope", "--out", str(out)]) == 2
    assert "no arm is labelled 'nope'" in capsys.readouterr().err


def test_two_seeds_give_min_max_and_no_verdict(study, tmp_path):
    """At 2 seeds an arm's interval is the min–max of its values (no t-interval: at n = 2 it is ±12.7 standard
    errors), and no verdict is drawn from it: the verdicts are defined on confidence intervals only."""
    two = tmp_path / "two"
    (two / "runs").mkdir(parents=True)
    plan = json.loads((study / "plan.json").read_text())
    kept = [p for p in plan["points"] if p["axes"]["seed"] != str(SEEDS[-1])]
    for point in kept:
        (two / "runs" / point["name"]).symlink_to(study / "runs" / point["name"], target_is_directory=True)
    (two / "plan.json").write_text(json.dumps({**plan, "points": kept}))
    out = tmp_path / "out2"
    assert frontier_main([str(two), "--out", str(out)]) == 0
    with open(out / "frontier.csv", newline="") as fh:
        rows = {r["codec"]: r for r in csv.DictReader(fh)}
    for codec, (_, accs) in ARMS.items():
        row = rows[codec]
        assert (row["test_acc_avg_n"], row["test_acc_avg_interval"]) == ("2", "min–max")
        assert (float(row["test_acc_avg_low"]), float(row["test_acc_avg_high"])) == (min(accs[:2]), max(accs[:2]))
        assert row["verdict"] == "–", codec
    md = (out / "frontier.md").read_text()
    assert "min–max, n=2" in md and "±" not in md.split("Rule:")[1]


def test_label_colours_read_on_white():
    """Every palette colour, as label text, reaches WCAG's 3:1 contrast against white (checked with the WCAG
    formula written here); colours that already do are kept, the others only darkened (hue kept)."""
    from matplotlib.colors import to_rgb

    from analysis.style import PALETTE, text_colour

    def lum(rgb):
        lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    darkened = 0
    for colour in PALETTE:
        rgb, text = to_rgb(colour), text_colour(colour)
        assert 1.05 / (lum(text) + 0.05) >= 3.0, colour
        if 1.05 / (lum(rgb) + 0.05) >= 3.0:
            assert text == pytest.approx(rgb)
        else:
            darkened += 1
            scale = [t / c for t, c in zip(text, rgb) if c > 0]
            assert max(scale) - min(scale) < 1e-12 and 0 < scale[0] < 1
    assert darkened >= 1  # the palette's yellow (#F0E442) is one

"""Real data no one here made: scikit-learn's bundled digits written as `npz:` and `folder:` data sets, then
(with --run) trained by fedavg on 16 peers under several partitions: `python scripts/real_data.py OUT [--run]
[--seeds 0 1 2] [--figures docs/figures]` (docs/data.md, "Real data: scikit-learn's digits").

The data: `sklearn.datasets.load_digits()`, 1,797 greyscale 8×8 images of handwritten digits (10 classes, UCI
"Optical Recognition of Handwritten Digits"), shipped inside the scikit-learn wheel, so nothing is downloaded.
Pixels are integers 0..16; they are written as uint8 0..255 by `(255 v + 8) // 16` (v * 255/16 rounded half up:
0 -> 0, 8 -> 128, 16 -> 255). The split is fixed and seedless: sklearn's order, the first 1,438 images
(80%) train, the last 359 test. OUT receives

- `digits.npz`: x_train (1438, 8, 8), y_train, x_test (359, 8, 8), y_test, classes ("0".."9");
- `digits/train/<class>/<index>.png`, `digits/test/<class>/<index>.png`: the same pixels as 8-bit grey PNGs,
  `<index>` the image's position in sklearn's order (4 digits), so `--image-size 8` reads back the npz's pixels;
- `digits32.npz`: the same split with every image resized to 32×32 as `folder:` resizes (Pillow, bilinear), the
  size the runs use (fedavg's training crop pads by 4 pixels, fixed: on 8×8 images it hides half the digit);
- `digits-train.npz`: the training images only (8×8), to choose options on a held-out part of train
  (`--test-split 0.2`) without looking at the test set.

scikit-learn is the `examples` extra (pyproject.toml); the package and its tests never import it.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

N_TRAIN = 1438  # round(0.8 * 1797): sklearn's order, the first 80% train, the rest test

#: The budget every case shares, chosen once on a held-out part of train (docs/data.md: what was tried), never on
#: the test set: fedavg's own recipe (SGD, momentum 0.9, weight decay 1e-5) as the server average of 16 peers.
BUDGET: dict[str, Any] = dict(algorithm="fedavg", peers=16, topology="complete", mixing="uniform",
                              weight_by_data=True, model="simple-cnn", rounds=100, local_epochs=2, batch_size=16,
                              lr=0.01, eval_every=20, progress=False)

#: case -> (dataset under OUT, its options over BUDGET); --figures gets data-digits-<partition>.png.
#: The 32-pixel cases were chosen while fedavg's crop padded by a fixed 4 pixels; npz8-iid is the 8-pixel file, whose
#: crop now pads by 1 (p2pfl.data.augment.crop_padding; docs/data.md).
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "npz-iid": ("digits32.npz", dict(partition="iid")),
    "npz-shard": ("digits32.npz", dict(partition="shard", shards_per_peer=2)),
    "npz-pathological": ("digits32.npz", dict(partition="pathological", classes_per_peer=2)),
    "folder-shard": ("digits", dict(partition="shard", shards_per_peer=2, image_size=32)),
    "npz-dirichlet": ("digits32.npz", dict(partition="dirichlet", alpha=0.1)),
    "npz-skew": ("digits32.npz", dict(partition="skew", beta=0.5)),
    "npz-one-class": ("digits32.npz", dict(partition="one-class")),
    "npz-inner-dirichlet": ("digits32.npz", dict(partition="inner-dirichlet", alpha=0.1)),
    "npz-quantity": ("digits32.npz", dict(partition="quantity", quantity_exponent=1.0)),
    "npz8-iid": ("digits.npz", dict(partition="iid", model="resnet-small")),
}
SIDE = 32  # the side the 32-pixel runs use (simple-cnn needs at least 16 pixels)


def digits() -> tuple[np.ndarray, np.ndarray]:
    """sklearn's digits as uint8 images (N, 8, 8) in 0..255 and int64 labels, in sklearn's order."""
    from sklearn.datasets import load_digits

    d = load_digits()
    v = d.images.astype(np.int64)  # integers 0..16 stored as float64
    assert v.min() >= 0 and v.max() <= 16 and np.array_equal(v, d.images)
    return ((255 * v + 8) // 16).astype(np.uint8), d.target.astype(np.int64)


def export(out: Path) -> None:
    """Write digits.npz, digits32.npz, digits-train.npz and the digits/ folder tree into `out`."""
    from PIL import Image

    x, y = digits()
    out.mkdir(parents=True, exist_ok=True)
    classes = np.array([str(c) for c in range(10)])
    parts = {"train": (x[:N_TRAIN], y[:N_TRAIN], 0), "test": (x[N_TRAIN:], y[N_TRAIN:], N_TRAIN)}
    np.savez(out / "digits.npz", x_train=parts["train"][0], y_train=parts["train"][1], x_test=parts["test"][0],
             y_test=parts["test"][1], classes=classes)
    big = np.stack([np.asarray(Image.fromarray(img).resize((SIDE, SIDE), Image.Resampling.BILINEAR))
                    for img in x])  # as folder: resizes (p2pfl/data/datasets/folder.py)
    np.savez(out / "digits32.npz", x_train=big[:N_TRAIN], y_train=y[:N_TRAIN], x_test=big[N_TRAIN:],
             y_test=y[N_TRAIN:], classes=classes)
    np.savez(out / "digits-train.npz", x_train=parts["train"][0], y_train=parts["train"][1], classes=classes)
    root = out / "digits"
    if root.exists():
        shutil.rmtree(root)
    for split, (xs, ys, start) in parts.items():
        for c in range(10):
            (root / split / str(c)).mkdir(parents=True)
        for i, (img, label) in enumerate(zip(xs, ys)):
            Image.fromarray(img).save(root / split / str(label) / f"{start + i:04d}.png")
    print(f"wrote digits.npz, digits32.npz, digits-train.npz and digits/ into {out} ({N_TRAIN} train, "
          f"{len(y) - N_TRAIN} test images, 8x8 grey, 10 classes)")


def run_cases(out: Path, seeds: list[int], figures: Path | None, cases: list[str]) -> None:
    """Run every case for every seed and print a markdown table of the final mean test accuracy."""
    import p2pfl

    rows = []
    for case in cases:
        data, partition = CASES[case]
        accs, secs = [], []
        for seed in seeds:
            started = time.time()
            fmt = "npz" if data.endswith(".npz") else "folder"
            run = p2pfl.simulate(**{**BUDGET, **partition}, dataset=f"{fmt}:{out / data}", seed=seed,
                                 out=str(out / "runs"), name=f"{case}-s{seed}")
            secs.append(time.time() - started)
            accs.append(float(run.summary["final"]["test_acc_avg"]))
            print(f"{case} seed {seed}: test_acc_avg {accs[-1]:.4f} in {secs[-1]:.0f} s", flush=True)
            picture = None if figures is None else figures / f"data-digits-{partition['partition']}.png"
            if picture is not None and not picture.exists():  # one per partition: it depends on the labels only
                figures.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(Path(run.path) / "plots" / "partition.png", picture)
        spread = statistics.stdev(accs) if len(accs) > 1 else 0.0
        rows.append((case, partition, statistics.mean(accs), spread, min(accs), max(accs), statistics.mean(secs)))
    print("\n| case | partition | test accuracy (mean ± sd over seeds) | min .. max | s per run |")
    print("|---|---|---|---|---|")
    for case, partition, mean, sd, lo, hi, sec in rows:
        flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in partition.items())
        print(f"| {case} | `{flags}` | {mean:.3f} ± {sd:.3f} | {lo:.3f} .. {hi:.3f} | {sec:.0f} |")
    print(f"\nseeds {seeds}; chance 0.100")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder the data sets (and runs/) are written to")
    parser.add_argument("--run", action="store_true", help="also train fedavg on 16 peers for every case")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--figures", type=Path, help="copy each partition's partition.png here, unless there")
    args = parser.parse_args(argv)
    try:
        import sklearn  # noqa: F401
    except ImportError:
        print("scripts/real_data.py needs scikit-learn: pip install -e '.[examples]'", file=sys.stderr)
        return 2
    export(args.out)
    if args.run:
        run_cases(args.out.resolve(), args.seeds, args.figures, args.cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a dataset is: the `DATASETS` registry (--dataset), the `Dataset` component base, the `Arrays` a
dataset's `load` gives, and the `ImageDataset` a run holds (uint8 images N×C×H×W, int64 labels, normalisation).

A dataset is a class registered with ``@DATASETS.register("name")`` whose `load()` returns `Arrays`: train and
test images (N×C×H×W or N×H×W×C or N×H×W; uint8, or float in [0, 1]), integer labels, and optionally the number
of classes, their names and the per-channel mean/std (computed from the training images when not given). Its
`Options` (flags, YAML keys) reach it as ``self.options``; `prepare()` is what one rank per node does before
every rank loads (find, decode, cache, download), nothing by default. Its images' training transform is its own
too: `flip` and `pad_fill` (the default: photographs, mirrored and padded with black, as MOON trains on CIFAR).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from p2pfl.capabilities import FEATURES, SEQUENCE_LABELS, TOKENS
from p2pfl.data.augment import ImageTransform
from p2pfl.options import Check
from p2pfl.registry import Component, Registry

DATASETS: Registry[type[Dataset]] = Registry("dataset", option="dataset", package="p2pfl.data.datasets")

#: The most classes a dataset may have. Classes are counted from the labels (the largest plus one), and a run builds
#: a name for each, a model's output of that width and a peers × classes table of counts: one stray label of 2**40
#: would be terabytes. 100 000 is over four times ImageNet-21k's 21 841 classes, the most of any common benchmark.
MAX_CLASSES = 100_000


@dataclass
class ImageDataset:
    """A labelled image dataset in memory: uint8 images N×C×H×W and int64 labels (float multi-hot when
    ``multilabel``), plus the per-channel mean/std used to normalise it."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    classes: tuple[str, ...]
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    multilabel: bool = False
    extra: dict = field(default_factory=dict)
    #: Each training sample's natural group (a LEAF user), int64 0..G−1, for --partition natural; None: none.
    groups: torch.Tensor | None = None
    #: Token sequences with one label each (capability SEQUENCE_LABELS): the tokens' names (the model's embedding
    #: is built for them) and the id that pads a sequence to the common length T; () and None otherwise.
    vocabulary: tuple[str, ...] = ()
    padding: int | None = None
    #: What its images allow the training augmentations (the dataset's `transform`): the flip, the padding's fill.
    transform: ImageTransform = ImageTransform()

    @property
    def features(self) -> bool:
        """Whether it holds feature vectors N×F (float32, a tabular dataset's) rather than images N×C×H×W."""
        return self.x_train.dim() == 2 and self.x_train.is_floating_point()

    @property
    def sequence_labels(self) -> bool:
        """Whether it holds token sequences with one label each (capability SEQUENCE_LABELS: classify a sequence)."""
        return bool(self.vocabulary)

    @property
    def tokens(self) -> bool:
        """Whether it holds token sequences N×T for next-token prediction (int64 ids of a vocabulary of
        num_classes; capability TOKENS)."""
        return self.x_train.dim() == 2 and self.x_train.dtype == torch.int64 and not self.sequence_labels

    @property
    def channels(self) -> int:
        """Number of image channels (1 or 3); of features F for feature vectors (F channels of one pixel); the
        vocabulary's size for token sequences (a model's embedding is built from it)."""
        if self.sequence_labels:
            return len(self.vocabulary)
        return self.num_classes if self.tokens else int(self.x_train.shape[1])

    @property
    def image_size(self) -> int:
        """Image height (the images are square for every dataset here); 1 for feature vectors; the sequence
        length T for token sequences."""
        if self.tokens or self.sequence_labels:
            return int(self.x_train.shape[1])
        return 1 if self.features else int(self.x_train.shape[2])

    def __repr__(self) -> str:
        return (f"ImageDataset({self.name!r}, train={tuple(self.x_train.shape)}, test={tuple(self.x_test.shape)}, "
                f"classes={self.num_classes}, multilabel={self.multilabel})")


@dataclass
class Arrays:
    """What a dataset's `load` gives (numpy arrays or torch tensors). Images: N×C×H×W, N×H×W×C (the channel axis
    is the one of 1, 3 or 4 entries; axis 1 when both are) or N×H×W (one channel), square, uint8 or float in
    [0, 1] (stored rounded to uint8, as every dataset's); or, from a dataset with the capability FEATURES, feature
    vectors N×F (stored float32, given to the model as they are: the dataset standardises them); or, from a
    dataset with the capability TOKENS, token sequences N×T (int64 ids in [0, num_classes): the vocabulary is the
    classes, the label of a sequence its last token); or, from a dataset with the capability SEQUENCE_LABELS, token
    sequences N×T (int64 ids in [0, len(vocabulary)), padded with `padding`) with one label each; labels: integers
    in [0, num_classes)."""

    x_train: Any
    y_train: Any
    x_test: Any
    y_test: Any
    #: None: the largest label plus one.
    num_classes: int | None = None
    #: The classes' names; None: "0", "1", ...
    classes: Sequence[str] | None = None
    #: Per channel, of images scaled to [0, 1]; None: the training images' own (float64, unbiased std); feature
    #: vectors: 0 and 1 per feature (the identity).
    mean: Sequence[float] | None = None
    std: Sequence[float] | None = None
    #: Entries of the manifest's "dataset" record (where it was read from, its parameters).
    extra: dict = field(default_factory=dict)
    #: Each training sample's natural group (its LEAF user), integers 0..G−1; None: the data has none.
    groups: Any = None
    #: SEQUENCE_LABELS: the tokens' names (ids 0..V−1) and the padding id; None for every other dataset.
    vocabulary: Sequence[str] | None = None
    padding: int | None = None


#: A dataset's capability: generated data that stands in for any dataset a task names (tests of FedMuscle's tasks
#: on images no one has to download).
STAND_IN = "stand-in"


class Dataset(Component):
    """A dataset component: `load` gives its `Arrays`; `prepare` readies them on a node first."""

    #: Its options, read from the run's configuration (their defaults outside a run); None without `Options`.
    options: Any
    #: Its number of classes when known before loading (None: counted from the labels once loaded); a
    #: `num_classes` keyword of its `load` (the synthetic set's) overrides it.
    num_classes: ClassVar[int | None] = None
    #: When its classes split in two coarse ones (CIFAR-10: vehicles 0, 1, 8, 9 vs animals), the classes of the
    #: first; FedMuscle's two-class task cifar10-coarse runs on a dataset that declares them. None: no such split.
    coarse_classes: ClassVar[tuple[int, ...] | None] = None
    #: The keywords its `load` takes (the synthetic set's geometry and seed), in the order they are listed.
    load_options: ClassVar[tuple[str, ...]] = ()
    #: Whether its training images may be mirrored (supervised crop+flip, SimCLR's and MAE's views): not where a
    #: mirror image is another class (handwriting: a mirrored 'b' is a 'd').
    flip: ClassVar[bool] = True
    #: The uint8 value the supervised crop's padding is filled with: 0 (black), or its images' background.
    pad_fill: ClassVar[int] = 0

    def __init__(self, options: Any = None, root: Any = None, allow_download: bool = False) -> None:
        self.options = options
        self.root = root  # the data root (p2pfl.data.datasets.data_root), for datasets read from files
        self.allow_download = allow_download

    def prepare(self) -> None:
        """Make the data loadable on this node; run by one rank per node while the others wait (default: nothing
        to do, and no waiting)."""

    def load(self) -> Arrays:
        """The train and test arrays (keyword arguments of `load_dataset` arrive here, for datasets that take
        them)."""
        raise NotImplementedError

    def transform(self) -> ImageTransform:
        """What its images allow the training augmentations: its `flip` and `pad_fill`."""
        return ImageTransform(flip=self.flip, fill=self.pad_fill)

    @classmethod
    def check(cls, cfg: Any, check: Check) -> None:
        """A dataset of feature vectors (capability FEATURES), token sequences (TOKENS) or labelled token sequences
        (SEQUENCE_LABELS) runs with a method and a model that take them, and without image options; one of
        neither with no model of token ids."""
        from p2pfl.models.encoders import MODELS
        from p2pfl.options import catalogue

        kind = next((k for k in (FEATURES, TOKENS, SEQUENCE_LABELS) if k in cls.capabilities), None)
        if kind is None:
            model = MODELS.selected(cfg)
            texts = [n + ":PATH" for n in DATASETS.names() if {TOKENS, SEQUENCE_LABELS} & DATASETS.get(n).capabilities]
            check(model is None or TOKENS not in model.capabilities, "model",
                  f"{cfg.model} takes token ids; --dataset {cfg.dataset} gives none (use {' or '.join(texts)})")
            return

        argument = getattr(cls, "argument", None)
        what, trains, takes = {FEATURES: ("feature vectors", "trains on images only", "takes images"),
                               TOKENS: ("token sequences", "predicts no next token", "takes no token ids"),
                               SEQUENCE_LABELS: ("token sequences with one label each", "classifies no sequence",
                                                 "classifies no token sequence")}[kind]
        given = f"--dataset {cls.name}{':' + argument if argument else ''} gives {what}"
        method = catalogue().get(cfg.algorithm, cfg)
        check(method.can(kind), "algorithm", f"{cfg.algorithm} {trains} ({method.why_not(kind)}); {given}")
        model = MODELS.selected(cfg)
        check(model is not None and kind in model.capabilities, "model",
              f"{cfg.model} {takes}; {given}: use {' or '.join(MODELS.capable(kind))}")
        check(cfg.rotate_groups == 1, "rotate_groups", f"rotates images; {given}")

    @classmethod
    def prepares(cls) -> bool:
        """Whether it has anything to prepare (a dataset that has not waits for nobody)."""
        return cls.prepare is not Dataset.prepare

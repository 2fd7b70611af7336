"""What a partition is: a registered class whose `split` divides a labelled training set's indices among K peers.

A partition is one file of p2pfl.data.partitions registered in `PARTITIONS` (`@PARTITIONS.register("name")`, a
researcher's from their own file the same way). It is a frozen dataclass whose fields are its parameters (the
keywords `partition(...)` takes, read from the run's configuration under the same names); its `Options` declare
those that are flags (`--alpha`, `--shards-per-peer`), with their ranges and defaults. `split` draws only from the
generator it is given, ``numpy_rng(seed, SHARED, "partition")``, so a partition is a pure function of the labels, the
seed, K and its parameters, whichever process computes it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np

from p2pfl.registry import Component, Registry

#: The partitions, by their --partition name.
PARTITIONS: Registry[Any] = Registry("partition", option="partition", package="p2pfl.data.partitions")


class PartitionError(ValueError):
    """A partition that cannot be made with the requested parameters (one line naming what to change)."""


class Partition(Component):
    """A split of indices 0..N−1 among K peers; subclasses are frozen dataclasses of their parameters."""

    #: The parameters a run's label shows, e.g. ``dirichlet(alpha=0.5)`` (None: every parameter).
    shown: ClassVar[tuple[str, ...] | None] = None
    #: Whether it splits by each sample's natural group (a LEAF user: `split_groups`) rather than by labels.
    grouped: ClassVar[bool] = False

    def split(self, y: np.ndarray, k: int, c: int, rng: np.random.Generator) -> list[np.ndarray]:
        """One index array per peer for int64 labels `y` in 0..c−1, drawing only from `rng`; indices may be left
        out (a scheme that does not cover every sample) but never given twice."""
        raise NotImplementedError

    def split_groups(self, groups: np.ndarray, k: int, rng: np.random.Generator) -> list[np.ndarray]:
        """One index array per peer from each sample's group (int64 0..G−1), drawing only from `rng` (a
        `grouped` partition's split)."""
        raise NotImplementedError

    @classmethod
    def parameters(cls) -> tuple[str, ...]:
        """The names of its parameters (its dataclass fields)."""
        return tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else ()

    def record(self) -> dict[str, Any]:
        """Its parameters, as the manifest's partition entry records them."""
        return {name: getattr(self, name) for name in self.parameters()}

    def label(self) -> str:
        """``name(param=value, ...)`` with the `shown` parameters (the name alone when there are none)."""
        shown = self.parameters() if self.shown is None else self.shown
        inner = ", ".join(f"{name}={getattr(self, name)}" for name in shown)
        return f"{self.name}({inner})" if inner else self.name

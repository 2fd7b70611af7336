"""The set-up the MPI benchmarks share: one peer per rank on a cycle, a seeded ResNet-18-sized payload."""
from __future__ import annotations

import argparse

import networkx as nx
import torch

import topologies
from p2pfl.comm import Placement, Transport, World


def cycle_arguments(repeats: int) -> argparse.ArgumentParser:
    """--numel (11.2M floats, ResNet-18) and --repeats."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--numel", type=int, default=11_200_000)
    parser.add_argument("--repeats", type=int, default=repeats)
    return parser


def cycle_exchange(numel: int) -> tuple[World, nx.Graph, Transport, torch.Tensor]:
    """The world, a cycle over its ranks, their exchange, and this rank's payload of `numel` floats."""
    torch.set_num_threads(1)
    world = World.detect()
    graph = topologies.build("cycle", world.size)
    exchange = Transport(world, graph, Placement(world.size, world.size), timeout=600)
    return world, graph, exchange, torch.randn(numel, generator=torch.Generator().manual_seed(world.rank))

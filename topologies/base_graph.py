"""Base-(k+1) graphs (Takezawa, Sato, Bao, Niwa and Yamada, "Beyond Exponential Graph: Communication-Efficient
Topologies for Decentralized Learning via Finite-time Convergence", NeurIPS 2023; their code: yukiTakezawa/BaseGraph):
a finite sequence of graphs of maximum degree k whose mixing matrices multiply to exactly J = 11ᵀ/K, for any K, in
O(log_{k+1} K) rounds; then the sequence repeats. Every W is symmetric and doubly stochastic.

The pieces, each a round's disjoint blocks:
- the k-peer hyper-hypercube of m peers whose prime factors are all ≤ k + 1: m = f_1 ⋯ f_L (f ≤ k + 1), peers
  numbered in that mixed radix; round l averages each clique of f_l peers that differ only in digit l (1/f_l each);
  after L rounds every peer holds the average;
- the simple Base-(k+1) graph of any m: m = Σ_l a_l (k+1)^{p_l} in base k + 1 (p_1 > … > p_L, 1 ≤ a_l ≤ k); group
  V_l of a_l (k+1)^{p_l} peers, cut into a_l subgroups of (k+1)^{p_l}. (1) each V_l averages itself by its
  hyper-hypercube; (2) for l = 1..L−1 in turn, every peer of V_{l+1} ∪ … ∪ V_L links to one peer of each subgroup of
  V_l, with weight r/a_l on each link, r = |V_l| / |V_l ∪ … ∪ V_L| (the remaining peers of V_l form cliques of at
  most k + 1), so V_L ends at the average of all; (3) each subgroup of V_l then re-averages by its hyper-hypercube;
- the Base-(k+1) graph: K = s·q with s the largest divisor of K whose prime factors are ≤ k + 1; the simple graph on s
  blocks of q consecutive peers at once, then the hyper-hypercube on the q strided sets {j, q + j, 2q + j, …};
  or, when it is shorter, the simple graph on all K.

``--topology base --topology-params max_degree=k`` and ``--topology simple-base`` (the simple graph on all K); the
manifest's network entry records the period and the round of exact consensus (both the sequence's length).
"""
from __future__ import annotations

import functools

import networkx as nx

from topologies.base import TopologyError
from topologies.dynamic import Cycle, register_dynamic

#: One round: its off-diagonal weights W_ij = W_ji by peer pair (i < j); W_ii is what the row leaves.
Mixing = dict[tuple[int, int], float]


def _max_degree(name: str, max_degree: object, n: int) -> int:
    """`max_degree` as an int in [1, max(1, n - 1)] (a peer of n has at most n - 1 neighbours, and the
    construction's loops run over the degree: a larger one is refused before they start); TopologyError naming
    the topology otherwise."""
    if isinstance(max_degree, bool) or not isinstance(max_degree, int) or max_degree < 1:
        raise TopologyError(f"topology {name!r}: max_degree must be an integer >= 1, got {max_degree!r}")
    if max_degree > max(1, n - 1):
        raise TopologyError(f"topology {name!r}: max_degree {max_degree} is more than a peer of {n} can have "
                            f"(at most {max(1, n - 1)} neighbours)")
    return max_degree


def _factors(m: int, k: int) -> list[int] | None:
    """m as a product of factors in 2..k+1, smallest first (taken greedily from k + 1 down); None if m has a prime
    factor above k + 1."""
    out = []
    for f in range(k + 1, 1, -1):
        while m % f == 0:
            out.append(f)
            m //= f
    return out[::-1] if m == 1 else None


def _smooth_part(m: int, k: int) -> int:
    """The largest divisor of m whose prime factors are all ≤ k + 1."""
    part = 1
    for f in range(2, k + 2):
        while m % f == 0:
            part *= f
            m //= f
    return part


def _cliques(w: Mixing, clique: list[int]) -> None:
    """Average `clique` uniformly: 1/|clique| between each pair (and on each diagonal)."""
    for x, i in enumerate(clique):
        for j in clique[x + 1:]:
            w[min(i, j), max(i, j)] = 1.0 / len(clique)


def hyper_hypercube(nodes: list[int], k: int) -> list[list[list[int]]]:
    """The k-peer hyper-hypercube on `nodes` (their count k+1-smooth): per round, its cliques."""
    factors = _factors(len(nodes), k)
    assert factors is not None, f"{len(nodes)} peers have a prime factor above {k + 1}"
    rounds, stride = [], 1
    for f in factors:
        rounds.append([[nodes[i + stride * d] for d in range(f)] for i in range(len(nodes)) if i // stride % f == 0])
        stride *= f
    return rounds


def _apply(w: Mixing, rounds: list[list[list[int]]], step: int) -> None:
    """Add round `step` (cyclically) of a hyper-hypercube's rounds to `w` (nothing for one peer: no rounds)."""
    if rounds:
        for clique in rounds[step % len(rounds)]:
            _cliques(w, clique)


def _base_digits(m: int, base: int) -> list[tuple[int, int]]:
    """m = Σ a·base^p: its nonzero digits (a, p), the highest power first."""
    out, p = [], 0
    while m:
        m, a = divmod(m, base)
        if a:
            out.append((a, p))
        p += 1
    return out[::-1]


def simple_base(nodes: list[int], k: int) -> list[Mixing]:
    """The simple Base-(k+1) graph on `nodes`: its rounds' mixing matrices (see the module docstring)."""
    m = len(nodes)
    if m == 1:
        return []
    if _factors(m, k) is not None:
        rounds = hyper_hypercube(nodes, k)
        return [_round_of(cliques) for cliques in rounds]
    digits = _base_digits(m, k + 1)
    sizes = [a * (k + 1) ** p for a, p in digits]
    starts = [sum(sizes[:x]) for x in range(len(sizes))]
    groups = [nodes[s:s + size] for s, size in zip(starts, sizes)]
    subgroups = [[g[c * (k + 1) ** p:(c + 1) * (k + 1) ** p] for c in range(a)] for g, (a, p) in zip(groups, digits)]
    whole = [hyper_hypercube(g, k) for g in groups]
    within = [hyper_hypercube(subs[0], k) for subs in subgroups]  # every subgroup of a group alike
    out: list[Mixing] = []
    for step in range(len(whole[0])):  # (1) each group averages itself
        w: Mixing = {}
        for rounds in whole:
            _apply(w, rounds, step)
        out.append(w)
    done = [0] * len(groups)  # re-averaging steps of each group's subgroups so far
    last = len(groups) - 1
    s = 0
    while True:
        w = {}
        free = [list(sub) for sub in subgroups[s]] if s < last else []
        ratio = sizes[s] / sum(sizes[s:]) / len(free) if free else 0.0
        for g in range(last, -1, -1):
            if g > s:  # (2) every peer of a later group links to one peer of each subgroup of group s
                for i in groups[g]:
                    for sub in free:
                        j = sub.pop()
                        w[min(i, j), max(i, j)] = ratio
            elif g == s and g != last:  # the rest of group s (all equal yet) in cliques of at most k + 1
                rest = [j for sub in free for j in sub]  # in the group's order
                while len(rest) > 1:
                    _cliques(w, rest[:k + 1])
                    rest = rest[k + 1:]
            else:  # (3) the subgroups of an earlier group re-average (a group smaller than k + 1 as a whole)
                if sizes[g] < k + 1:
                    _apply(w, whole[g], done[g])
                else:
                    for sub in subgroups[g]:
                        _apply(w, _relabel(within[g], subgroups[g][0], sub), done[g])
                done[g] += 1
        out.append(w)
        if done[0] == len(within[0]):
            return out
        s += 1


def _relabel(rounds: list[list[list[int]]], old: list[int], new: list[int]) -> list[list[list[int]]]:
    """A hyper-hypercube's rounds built on `old` moved onto `new` (position for position)."""
    where = dict(zip(old, new))
    return [[[where[i] for i in clique] for clique in cliques] for cliques in rounds]


def _round_of(cliques: list[list[int]]) -> Mixing:
    w: Mixing = {}
    for clique in cliques:
        _cliques(w, clique)
    return w


@functools.lru_cache(maxsize=16)
def sequence(n: int, k: int, simple: bool = False) -> tuple[Mixing, ...]:
    """The Base-(k+1) graph on n peers (`simple`: the simple Base-(k+1) graph): every round's off-diagonal W."""
    everyone = list(range(n))
    plain = simple_base(everyone, k)
    if simple:
        return tuple(plain)
    smooth = _smooth_part(n, k)
    q = n // smooth
    blocks = [simple_base(everyone[q * b:q * (b + 1)], k) for b in range(smooth)]
    strided = [hyper_hypercube(everyone[j::q], k) for j in range(q)]
    if len(plain) < len(blocks[0]) + len(strided[0]):
        return tuple(plain)
    first = [{pair: v for rounds in blocks for pair, v in rounds[step].items()} for step in range(len(blocks[0]))]
    second = [_round_of([c for rounds in strided for c in rounds[step]]) for step in range(len(strided[0]))]
    return tuple(first + second)


def _links(n: int, t: int, k: int, simple: bool) -> nx.DiGraph:
    """Round t's links, both ways, each with its weight (the sequence repeats)."""
    rounds = sequence(n, k, simple)
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    for (i, j), v in sorted(rounds[(t - 1) % len(rounds)].items()):
        g.add_edge(j, i, weight=v)
        g.add_edge(i, j, weight=v)
    return g


def _support(n: int, k: int, simple: bool) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(range(n))
    g.add_edges_from(pair for rounds in sequence(n, k, simple) for pair in rounds)
    return g


def _cycle(n: int, k: int, simple: bool) -> Cycle:
    length = len(sequence(n, k, simple))
    return Cycle(length, length)


#: --max-degree K, the flag of both Base-(k+1) graphs
MAX_DEGREE = {"max_degree": "links a peer has at most in a round (k of Base-(k+1): base, simple-base)"}


@register_dynamic("base", directed=False, weighted=True, flags=MAX_DEGREE,
                  support=lambda n, max_degree=1: _support(n, _max_degree("base", max_degree, n), False),
                  cycle=lambda n, max_degree=1: _cycle(n, _max_degree("base", max_degree, n), False))
def base(n: int, seed: int, t: int, max_degree: int = 1) -> nx.DiGraph:
    """Base-(k+1) graph (Takezawa et al. 2023): degree ≤ k = max_degree, exact average after a finite period."""
    return _links(n, t, _max_degree("base", max_degree, n), False)


@register_dynamic("simple-base", directed=False, weighted=True, flags=MAX_DEGREE,
                  support=lambda n, max_degree=1: _support(n, _max_degree("simple-base", max_degree, n), True),
                  cycle=lambda n, max_degree=1: _cycle(n, _max_degree("simple-base", max_degree, n), True))
def simple_base_graph(n: int, seed: int, t: int, max_degree: int = 1) -> nx.DiGraph:
    """Simple Base-(k+1) graph (Takezawa et al. 2023): Base-(k+1) without its split of K's (k+1)-smooth part."""
    return _links(n, t, _max_degree("simple-base", max_degree, n), True)

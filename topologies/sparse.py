"""Sparse link and weight matrices (scipy CSR, indices ascending in every row): the round network's A and W at
any K in O(edges) memory and time, never K × K."""
from __future__ import annotations

from collections.abc import Iterable

import networkx as nx
import numpy as np
import scipy.sparse as sp


def from_pairs(rows: np.ndarray, cols: np.ndarray, n: int, values: np.ndarray | None = None,
               dtype: type = bool) -> sp.csr_matrix:
    """The n × n CSR matrix with `values` (default True) at (rows[k], cols[k]); duplicate pairs are summed
    (for booleans: or-ed), indices sorted."""
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    data = np.ones(len(rows), dtype=dtype) if values is None else np.asarray(values, dtype=dtype)
    out = sp.csr_matrix((data, (rows, cols)), shape=(n, n), dtype=dtype)
    out.sum_duplicates()
    out.sort_indices()
    return out


def links_matrix(graph: nx.Graph | nx.DiGraph, n: int) -> sp.csr_matrix:
    """A[i, j] = True when i hears from j: both ways for an undirected graph, j -> i for a directed one."""
    edges = np.array(list(graph.edges), dtype=np.int64).reshape(-1, 2)
    senders, receivers = edges[:, 0], edges[:, 1]
    if graph.is_directed():
        return from_pairs(receivers, senders, n)
    return from_pairs(np.concatenate([receivers, senders]), np.concatenate([senders, receivers]), n)


def pairs(a: sp.csr_matrix) -> tuple[np.ndarray, np.ndarray]:
    """The (row, column) of every stored entry, row-major, columns ascending within a row."""
    rows = np.repeat(np.arange(a.shape[0], dtype=np.int64), np.diff(a.indptr))
    return rows, a.indices.astype(np.int64)


def keep(a: sp.csr_matrix, mask: np.ndarray) -> sp.csr_matrix:
    """`a` with only the entries where `mask` (one flag per stored entry, row-major) is set."""
    rows, cols = pairs(a)
    return from_pairs(rows[mask], cols[mask], a.shape[0], a.data[mask], a.dtype.type)


def among(a: sp.csr_matrix, members: np.ndarray) -> sp.csr_matrix:
    """`a` restricted to rows and columns whose `members` flag (one per peer) is set, shape unchanged."""
    rows, cols = pairs(a)
    return keep(a, members[rows] & members[cols])


def without(a: sp.csr_matrix, links: Iterable[tuple[int, int]], both_ways: bool) -> sp.csr_matrix:
    """`a` with the (row, column) entries of `links` removed (and their transposes, `both_ways`)."""
    drop = [(int(i), int(j)) for i, j in links]
    if both_ways:
        drop += [(j, i) for i, j in drop]
    if not drop:
        return a
    rows, cols = np.array(drop, dtype=np.int64).T
    return difference(a, from_pairs(rows, cols, a.shape[0]))


def difference(a: sp.csr_matrix, b: sp.csr_matrix) -> sp.csr_matrix:
    """`a` without the entries stored in `b` (same shape)."""
    if not b.nnz:
        return a
    n = a.shape[0]
    rows, cols = pairs(a)
    brows, bcols = pairs(b)
    return keep(a, ~np.isin(rows * n + cols, brows * n + bcols))


def row_sums(w: sp.csr_matrix) -> np.ndarray:
    """Σ_j W_ij of every row, each summed in ascending column order (one fixed order, whatever K)."""
    out = np.zeros(w.shape[0])
    lengths = np.diff(w.indptr)
    width = int(lengths.max()) if len(lengths) else 0
    starts = w.indptr[:-1]
    for k in range(width):  # slot k of every row at once: a sequential sum per row
        rows = np.flatnonzero(lengths > k)
        out[rows] += w.data[starts[rows] + k]
    return out


def with_diagonal(off: sp.csr_matrix) -> sp.csr_matrix:
    """Off-diagonal weights completed with W_ii = 1 − Σ_j W_ij (each row's remaining mass on itself); entries
    that are exactly zero are not stored."""
    n = off.shape[0]
    diag = 1.0 - row_sums(off)
    rows, cols = pairs(off)
    everyone = np.arange(n, dtype=np.int64)
    w = from_pairs(np.concatenate([rows, everyone]), np.concatenate([cols, everyone]), n,
                   np.concatenate([off.data, diag]), np.float64)
    w.eliminate_zeros()
    return w

"""The membership attack's scores: the exact Mann–Whitney AUC and the accuracy of a loss threshold chosen on a
calibration half (p2pfl.curious.membership)."""
from __future__ import annotations

import numpy as np


def auc(members: np.ndarray, others: np.ndarray) -> float:
    """P(score of a member > score of a non-member) + ½ P(equal), over every pair (exact Mann–Whitney U / nm).
    Scores are "member-likeness" (the attack's: minus the loss)."""
    a, b = np.asarray(members, dtype=np.float64)[:, None], np.asarray(others, dtype=np.float64)[None, :]
    return float(((a > b).sum() + 0.5 * (a == b).sum()) / (a.size * b.size))


def null_sd(n: int, m: int) -> float:
    """The standard deviation of the AUC of n members and m non-members whose scores share one distribution
    (no ties): sqrt((n + m + 1) / (12 n m))."""
    return float(np.sqrt((n + m + 1) / (12 * n * m)))


def threshold(members: np.ndarray, others: np.ndarray) -> float:
    """The score threshold (member when score >= it) of highest balanced accuracy on this calibration data; ties
    to the lowest such threshold. Candidates: every score seen, and +inf (no member)."""
    candidates = np.unique(np.concatenate([members, others, [np.inf]]))
    tpr = (np.asarray(members)[None, :] >= candidates[:, None]).mean(axis=1)
    tnr = (np.asarray(others)[None, :] < candidates[:, None]).mean(axis=1)
    return float(candidates[int(np.argmax(tpr + tnr))])


def accuracy(members: np.ndarray, others: np.ndarray, at: float) -> float:
    """Balanced accuracy of "member when score >= at"."""
    return float(((np.asarray(members) >= at).mean() + (np.asarray(others) < at).mean()) / 2)

"""Decentralised optimisers (SPEC §7): what a round does with the network, one registered class a file (`--gossip`).

A scheme is a combine rule and a little state per peer on the gossip pipeline (p2pfl.gossip.schemes.base.Scheme).
One round of every scheme reads the peers' models X (before their local update), their gradients G (the local
update divided by −η: exactly the gradient for one plain step), the state each peer keeps (a dict in its record, so
checkpoints keep it) and the round's network, and returns the mixed models, every vector sent through the checked
exchange (bytes counted):

| scheme | sent | state |
|---|---|---|
| average | x − ηg (D-PSGD: X⁺ = W(X − ηG)) | — |
| gradient-tracking | x − ηy and y (X⁺ = W(X − ηY); Y⁺ = WY + G⁺ − G, Y₀ = G₀) | wy (WY of the last round), g |
| d2 | 2x − x⁻ − η(g − g⁻), the first round x − ηg | x⁻, g⁻ |
| exact-diffusion | as d2, mixed by W̃ = (W + I)/2 | x⁻, g⁻ |
| qgm | x − η(μm + g) (X⁺ = W X½; M⁺ = μM + (1 − μ)(X − X⁺)/η, M₀ = 0; μ = --momentum) | m |
| push-sum | [x − ηg, w]/(1 + out-degree) (X⁺ = P(X − ηG), w⁺ = Pw, w₀ = 1) | w |
| relay | to each tree neighbour j its own [m_{i→j}, c_{i→j}] (RelaySGD on a tree T) | m<j>, c<j>, x0 |
| choco | Q(x½ − x̂) (CHOCO-SGD: public copies x̂, γ = --consensus-step) | hat, in<j>, since, log<r> |
| muffliato | x − ηg + ξ, ξ ~ N(0, σ²I) (Muffliato; once with --muffliato-once), then plain mixes | muffliato_noised |
| decor | x − ηg + ξ + Σ_j ±v_ij, v_ij from the pair's shared stream (Decor), then plain mixes | — |

With E > 1 local steps (the learners, and the quadratic problem's --local-steps) a scheme corrects the whole local
update as if it were one step: G = (x − x_E)/η, x the mixable state before the E steps, x_E after them. A peer that
sits a round out keeps its state as it was. Each file's docstring gives its scheme's details.

A method runs a scheme through the run's instance (`RunContext.scheme`, built by `from_config` and `prepare`) and
asks its capabilities (base.py), never its name.
"""
from __future__ import annotations

from p2pfl.gossip.schemes.base import SCHEMES, Scheme

__all__ = ["SCHEMES", "Scheme"]

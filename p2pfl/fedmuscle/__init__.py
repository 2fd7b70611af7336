"""FedMuscle (SPEC §6): heterogeneous peers, each with its own model and task, that align their representations
on a public set and never send a weight.

- `algorithm`: the method (`fedmuscle`) and its peers trained alone (`local --peers-spec`, the Δ% baseline);
- `peerspec`: the ``--peers-spec`` file (each peer's model, task, dataset and label set; the public set);
- `multitask`: the workload of a spec (task shards, test sets, the public set in every peer's input format);
- `tasks`: the task transforms (coarse labels, mosaics, label sets) and the public-set split;
- `records`: its records (task metric, communication, manifest entries).

Importing the package imports none of them, so reading its records stays light.
"""

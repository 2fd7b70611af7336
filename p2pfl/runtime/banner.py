"""The defaults in sight: what rank 0's start banner says of a run beyond its method, topology and peers (the data
set and its classes, the partition with where its value came from, the model's parameters, the augmentation, the
chance level), the same as summary.json's `run_setup` (records.RunSetup), and the warning at the end when the final
accuracy sits at chance.

Read from the configuration and the manifest after the method's set-up (its `dataset`, `partition` and `model`
records), so the banner shows what ran, not what was asked: a method without data (consensus) shows none of it.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from p2pfl.records import AVG, PEER_MEAN, RunSetup

#: A final accuracy within this much (absolute) of chance is warned of at the end.
CHANCE_MARGIN = 0.01
#: The evaluation metrics that are accuracies over the dataset's classes (chance: 1 / classes), in the order the
#: warning looks for them.
ACCURACIES = ("test_acc", "probe_acc", "knn_acc")


def run_setup(cfg: Any, manifest: Mapping[str, Any], augment: str | None) -> RunSetup:
    """The run's RunSetup from its resolved configuration, its manifest after set-up and the method's augmentation
    in words (Algorithm.augmentation)."""
    partition = manifest.get("partition") if "dataset" in manifest else None
    model = manifest.get("model") or {}
    classes = len(partition["classes"]) if partition and partition.get("classes") else None
    return RunSetup(
        dataset=cfg.dataset if partition else None, classes=classes,
        partition=(partition.get("label") or partition.get("kind")) if partition else None,
        partition_source=cfg.source("partition") if partition else None,
        model=model.get("name"), parameters=model.get("parameters"),
        encoder_parameters=model.get("encoder_parameters"), head_parameters=model.get("head_parameters"),
        augment=augment if partition else None,
        chance=1.0 / classes if classes and _scored_by_accuracy(cfg) else None)


def _scored_by_accuracy(cfg: Any) -> bool:
    """Whether the run's score is an accuracy over its dataset's classes: not next-token prediction (a token
    sequence's classes are its vocabulary, guessed from the text, not uniformly)."""
    from p2pfl.capabilities import TOKENS
    from p2pfl.data.datasets import DATASETS
    try:
        return TOKENS not in DATASETS.get(cfg.dataset).capabilities
    except Exception:  # noqa: BLE001 - a dataset the registry no longer names: say nothing of chance
        return False


def _count(n: int | None) -> str:
    return f"{n:,}" if isinstance(n, int) else "?"


def banner_lines(setup: RunSetup, cfg: Any = None) -> list[str]:
    """The banner's lines after its first (at most two; none for a run without data): the data, then the model;
    `cfg` adds the hint on mirroring a dataset of one's own images when --flip was left on."""
    lines = []
    if setup["dataset"] is not None:
        classes = f" ({setup['classes']} classes)" if setup["classes"] else ""
        data = f"  data: {setup['dataset']}{classes}; partition {setup['partition']} ({setup['partition_source']})"
        if setup["augment"] is not None:
            data += f"; augment {setup['augment']}"
            if cfg is not None and "flip" in setup["augment"] and _own_flip_left_on(cfg):
                data += " (--no-flip if a mirror image is another class)"
        lines.append(data)
    if setup["model"] is not None and setup["parameters"] is not None:
        model = f"  model: {setup['model']}, {_count(setup['parameters'])} parameters"
        if setup["encoder_parameters"] is not None:
            model += (f" (encoder {_count(setup['encoder_parameters'])} + head "
                      f"{_count(setup['head_parameters'])})")
        if setup["chance"] is not None:
            model += f"; chance accuracy {setup['chance']:.3f}"
        lines.append(model)
    return lines


def _own_flip_left_on(cfg: Any) -> bool:
    """A dataset of one's own images mirrored because --flip was left at its default."""
    from p2pfl.config import own_data
    return own_data(cfg.dataset) and "flip" not in cfg.given and bool(getattr(cfg, "flip", False))


def final_accuracy(final: Mapping[str, Any]) -> tuple[str, float] | None:
    """The final evaluation's accuracy the chance check reads: the first of ACCURACIES it reports, its best value
    over the average model and the peers' mean (a run is at chance only when both are); None without one."""
    for name in ACCURACIES:
        values = [final[key] for key in (name + AVG, name + PEER_MEAN, name)
                  if isinstance(final.get(key), (int, float)) and not isinstance(final.get(key), bool)]
        if values:
            return name, float(max(values))
    return None


def _budget(cfg: Any) -> str:
    """The training budget in words, each value with its source where it is not the user's."""
    def marked(name: str, text: str) -> str:
        source = cfg.source(name)
        return text if source == "given" else f"{text} ({source})"

    steps = (marked("local_steps", f"{cfg.local_steps} local step(s)") if cfg.local_steps is not None
             else marked("local_epochs", f"{cfg.local_epochs:g} local epoch(s)"))
    return (f"{marked('rounds', f'{cfg.rounds} rounds')} of {steps}, {marked('lr', f'lr {cfg.lr:g}')}, "
            f"{marked('batch_size', f'batch {cfg.batch_size}')}")


def chance_warning(cfg: Any, setup: RunSetup, final: Mapping[str, Any]) -> str | None:
    """The warning of a final accuracy within CHANCE_MARGIN of chance, naming the budget; None otherwise (or where
    the run has no chance level: no classes, a metric that is no accuracy)."""
    chance = setup["chance"]
    scored = final_accuracy(final)
    if chance is None or scored is None or abs(scored[1] - chance) > CHANCE_MARGIN:
        return None
    name, value = scored
    easier = "" if cfg.partition == "iid" else " or an easier split (--partition iid)"
    return (f"the model is at chance: final {name} {value:.3f} against chance {chance:.3f} (1/{setup['classes']} "
            f"classes) after {_budget(cfg)}; partition {setup['partition']} ({setup['partition_source']}). Give it "
            f"more budget (--rounds, --local-epochs or --local-steps, --lr){easier}")

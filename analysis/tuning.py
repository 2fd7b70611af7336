"""A tuned study's choice in its report: each arm's chosen values, and every candidate's held-out score, from
STUDY/tuning.json (written by p2pfl.study.selection; the rule is p2pfl.study.tune's)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(map(_cell, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(map(_cell, row)) + " |" for row in rows])


def _score(value: float | None) -> str:
    return "diverged" if value is None else f"{value:.4g}"


def load_selection(study_dir: str | Path) -> dict[str, Any] | None:
    """tuning.json of the study folder, None when it has none (an untuned study, or tuning unfinished)."""
    path = Path(study_dir) / "tuning.json"
    return json.loads(path.read_text()) if path.is_file() else None


def tuning_markdown(selection: dict[str, Any]) -> str:
    """The report's tuning section: the rule, the chosen values per arm, and each arm's candidates' scores."""
    axes = list(dict.fromkeys(a for arm in selection["arms"] for a in arm["arm"]))
    options = list(dict.fromkeys(k for arm in selection["arms"] for k in arm["grid"]))
    chosen = [[*(arm["arm"].get(a, "") for a in axes), *(str(arm["chosen"].get(k, "–")) for k in options),
               _score(arm["score"]),
               "; ".join(f"{', '.join(f'{k}={v}' for k, v in c['values'].items())}: {_score(c['score'])}"
                         for c in arm["candidates"])]
              for arm in selection["arms"]]
    return "\n".join([
        "## Tuning", "",
        f"Each arm's options were chosen on data held out of the training set (--validation "
        f"{selection['validation']}), never the test set, over tuning seeds {selection['seeds']} (no final run's "
        f"seed). Rule: {selection['rule']}. Every tuning run's score is in tuning.csv of the study folder.", "",
        _table([*axes, *(f"chosen {k}" for k in options), f"held-out {selection['metric']}",
                "every candidate (mean held-out score)"], chosen), ""])


__all__ = ["load_selection", "tuning_markdown"]

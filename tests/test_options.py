"""The options' declarations: each method declares its own next to it (p2pfl.options), the configuration
imports no method, and a method's options read like the core's on the resolved configuration."""
from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys

import pytest

from p2pfl.config import RunConfig, make_config, options
from p2pfl.options import method_options, opt, sections

from conftest import ROOT


def test_importing_the_configuration_imports_no_method() -> None:
    code = ("import sys, p2pfl.config; "
            "print(sorted(m for m in sys.modules if m.startswith('p2pfl.algorithms') or m == 'torch'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_every_option_is_declared_once_and_methods_declare_theirs() -> None:
    names = [f.name for f in options()]
    assert len(names) == len(set(names))
    core = {f.name for f in dataclasses.fields(RunConfig) if "help" in f.metadata}
    declared = {f.name: cls for cls in sections().values() for f in dataclasses.fields(cls)}
    assert set(names) == core | set(declared) and not core & set(declared)
    assert {"mu", "muscle_m", "byol_tau", "mask_ratio", "clusters", "temperature", "vector_size"} <= set(declared)
    assert all(cls.__module__ != "p2pfl.config" for cls in declared.values())
    assert declared["prev_models"].__module__.endswith(".moon")


def test_method_options_are_frozen_attributes_that_travel() -> None:
    cfg = make_config(algorithm="moon", prev_models=3, muscle_m="5")
    assert (cfg.prev_models, cfg.muscle_m, cfg.mu) == (3, 5, 5.0) and "mu" in cfg.from_method
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.prev_models = 4  # type: ignore[misc]
    again = pickle.loads(pickle.dumps(cfg))
    assert again == cfg and again.to_dict() == cfg.to_dict()
    with pytest.raises(AttributeError):
        cfg.not_an_option  # noqa: B018
    assert RunConfig().mask_ratio == 0.75


def test_a_section_cannot_take_another_sections_option() -> None:
    class Clash:
        mu: float = opt(1.0, "taken", section="moon")

    with pytest.raises(ValueError, match="already section 'moon'"):
        method_options("clash")(Clash)

    class Late:
        validated_after = "never"
        late_option: int = opt(1, "checked at no point")

    with pytest.raises(ValueError, match="validated_after"):
        method_options("late")(Late)
    assert "clash" not in sections() and "late" not in sections()

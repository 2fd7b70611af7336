"""transformers and peft are the optional `hf` extra: the package runs without them, and each model that needs them
says so in one line (a ModelConfigError: exit 2 before training); no dependency carries an upper pin."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from p2pfl.models import build_encoder
from p2pfl.models.base import ModelConfigError

from conftest import ROOT

MISSING = "needs {}, which is not installed (the optional dependencies of the 'hf' extra: pip install 'p2pfl-sim[hf]')"


def test_transformers_and_peft_are_the_hf_extra_and_no_dependency_is_capped() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [d.split(">")[0].split("=")[0].split("<")[0].strip() for d in project["dependencies"]]
    assert "transformers" not in names and "peft" not in names
    assert {"transformers", "peft"} <= {d.split(">")[0] for d in project["optional-dependencies"]["hf"]}
    assert [d for d in project["dependencies"] if "<" in d or "==" in d] == []


def test_a_run_and_a_study_worker_need_neither(tmp_path: Path) -> None:
    """With transformers and peft unimportable (None in sys.modules), p2pfl.run and the study's worker import and
    a run finishes."""
    code = ("import sys; sys.modules['transformers'] = sys.modules['peft'] = None\n"
            "import p2pfl.study.worker, p2pfl.run\n"
            f"sys.exit(p2pfl.run.main(['--algorithm', 'consensus', '--rounds', '1', '--peers', '3', '--no-plots', "
            f"'--out', {str(tmp_path)!r}, '--name', 'r', '--no-progress']))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (tmp_path / "r" / "summary.json").is_file()


@pytest.mark.parametrize(("encoder", "what"), [("vit-tiny", "encoder 'vit-tiny'"),
                                               ("hf:/nowhere", "encoder 'hf:/nowhere'")])
def test_a_model_that_needs_transformers_says_so_in_one_line(encoder: str, what: str, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    with pytest.raises(ModelConfigError) as caught:
        build_encoder(encoder, 3, 32)
    assert str(caught.value) == f"{what} {MISSING.format('transformers')}"


def test_lora_without_peft_says_so_in_one_line(tmp_path: Path, monkeypatch) -> None:
    from transformers import ViTConfig, ViTModel

    ViTModel(ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=1,
                       num_attention_heads=2, intermediate_size=64)).save_pretrained(tmp_path)
    monkeypatch.setitem(sys.modules, "peft", None)
    assert build_encoder(f"hf:{tmp_path}", 3, 32).feat_dim == 32  # without LoRA peft is not needed
    with pytest.raises(ModelConfigError) as caught:
        build_encoder(f"hf:{tmp_path}", 3, 32, lora_rank=4)
    assert str(caught.value) == f"encoder 'hf:' with lora_rank > 0 {MISSING.format('peft')}"

"""Turn a pretraining run's ``best.pt`` into the checkpoint that ships in the package.

Keeps what fine-tuning and prediction read (config, model weights, featuriser, target names,
the ``pretrain`` record with the descriptors' names, normalisation and RDKit version), drops
the optimizer and RNG states, and adds a ``shipped`` record: the recipe (the command that made
it, the run's metrics) and the model's outputs on a few fixed molecules, which the test suite
reproduces from the shipped file. Run::

    python scripts/ship_pretrained.py runs/pretrain-moses/best.pt \
        --command "graphormer-urpe pretrain ..." --name pretrained
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from graphormer_urpe.io.checkpoint import (
    SHIPPED,
    WEIGHTS,
    load_checkpoint,
    save_checkpoint,
)

KEEP = ("format", "config", "model", "featurizer", "target_names", "metric", "task_type")
KEEP += ("train_mean", "pretrain", "epoch", "step", "best_metric")
REFERENCE_SMILES = [
    "CC(=O)Oc1ccccc1C(=O)O",  # aspirin
    "Cn1cnc2c1c(=O)n(C)c(=O)n2C",  # caffeine
    "CC(C)Cc1ccc(cc1)C(C)C(=O)O",  # ibuprofen
    "CC(=O)Nc1ccc(O)cc1",  # paracetamol
    "OC[C@H]1OC(O)[C@H](O)[C@@H](O)[C@@H]1O",  # glucose
    "c1ccc2c(c1)[nH]c1ccccc12",  # carbazole
    "CN1CCC[C@H]1c1cccnc1",  # nicotine
    "O=C(O)c1ccccc1O",  # salicylic acid
]


def reference_outputs(path: Path) -> list[list[float]]:
    """The model's outputs ``[R, K]`` on :data:`REFERENCE_SMILES` (one batch, fp32, CPU)."""
    from graphormer_urpe.inference import load_model, predict_smiles

    model = load_model(path, "cpu")
    values, errors = predict_smiles(model, REFERENCE_SMILES, progress=False, workers=0)
    assert not any(errors), errors
    return values.tolist()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="the pretraining run's best.pt")
    p.add_argument("--name", default="pretrained", choices=sorted(SHIPPED))
    p.add_argument("--command", required=True, help="the command that made the run")
    p.add_argument("--notes", default="", help="anything else a user should know")
    a = p.parse_args()
    torch.set_num_threads(1)
    ckpt = load_checkpoint(a.checkpoint)
    if ckpt.get("pretrain") is None:
        raise SystemExit(f"{a.checkpoint} is not a pretraining checkpoint")
    run = Path(a.checkpoint).parent
    metrics = (
        json.loads((run / "metrics.json").read_text()) if (run / "metrics.json").exists() else {}
    )
    out = WEIGHTS / SHIPPED[a.name]
    out.parent.mkdir(parents=True, exist_ok=True)
    state = {k: ckpt[k] for k in KEEP if k in ckpt}
    state["shipped"] = {"name": a.name, "command": a.command, "notes": a.notes}
    state["shipped"]["metrics"] = {k: v for k, v in metrics.items() if not isinstance(v, dict)}
    save_checkpoint(out, state)
    state["shipped"]["reference"] = {
        "smiles": REFERENCE_SMILES,
        "outputs": reference_outputs(out),
    }
    save_checkpoint(out, state)
    print(json.dumps({"file": str(out), "bytes": out.stat().st_size}, indent=1))


if __name__ == "__main__":
    main()

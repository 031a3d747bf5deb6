"""Published Graphormer weights in and out: convert, export, initialise a run from them.

* :func:`read_graphormer` reads a Hugging Face ``GraphormerForGraphClassification`` (a
  ``save_pretrained`` folder, a model object, or a state dict), a Microsoft fairseq checkpoint
  file (a ``.pt`` dict whose ``model`` holds ``encoder.graph_encoder.*``), or a checkpoint of
  this library, into a :class:`~graphormer_urpe.graph.model.Graphormer`.
* :func:`convert_checkpoint` writes it as a checkpoint of this library (the file ``evaluate``,
  ``predict`` and ``train --init-from`` read), optionally with URPE's ``C`` tables added at 1:
  the converted URPE-Graphormer then computes exactly what the original did.
* :func:`export_huggingface` writes a model of this library as a Hugging Face folder
  (``config.json`` + ``model.safetensors``) that ``transformers`` loads.
* :func:`init_from_checkpoint` builds a run's model from a checkpoint: every tensor whose name
  and shape match is loaded, the output layer is re-initialised when the number of outputs
  differs, and the loaded / newly initialised / ignored tensors are reported.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from ..graph.model import Graphormer, GraphormerConfig, fit_tables
from ..graph.published_weights import (
    InteropError,
    config_from_hf,
    config_to_hf,
    graphormer_to_hf_state,
    v2_to_graphormer,
)
from ..io.checkpoint import (
    SHIPPED,
    CheckpointError,
    folder_problem,
    incompatible_checkpoint,
    load_checkpoint,
    resolve_checkpoint,
    save_checkpoint,
    write_atomic,
)
from ..runtime.train_config import TrainConfig

__all__ = [
    "PretrainedSource",
    "read_graphormer",
    "convert_checkpoint",
    "export_huggingface",
    "init_from_checkpoint",
    "InitReport",
]

log = logging.getLogger(__name__)

Format = Literal["hf", "fairseq", "graphormer-urpe"]


@dataclass
class PretrainedSource:
    """A Graphormer read from published weights.

    Attributes:
        model: the model (eval mode, CPU, float32).
        format: ``hf``, ``fairseq`` or ``graphormer-urpe``.
        ignored: source tensors left out (unused by the source's own forward pass).
        meta: what the source says besides the weights (``featurizer``, ``target_names``,
            ``metric``, ``dataset``, ``train_config`` for this library's checkpoints).
    """

    model: Graphormer
    format: Format
    ignored: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)


def _safetensors_load(path: Path) -> dict[str, Tensor]:
    try:
        from safetensors.torch import load_file
    except ImportError as exc:
        raise ImportError(
            f"reading {path} needs the safetensors package: pip install safetensors"
        ) from exc
    return load_file(str(path))


def _read_hf_folder(folder: Path) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """State dict and options of a ``save_pretrained`` folder."""
    cfg_path = folder / "config.json"
    try:
        hf_config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InteropError(f"{cfg_path} cannot be read: {exc}") from exc
    if hf_config.get("model_type") != "graphormer":
        raise InteropError(
            f"{cfg_path}: model_type is {hf_config.get('model_type')!r}, not 'graphormer'"
        )
    state: dict[str, Tensor] = {}
    if (folder / "model.safetensors").is_file():
        state = _safetensors_load(folder / "model.safetensors")
    elif (folder / "model.safetensors.index.json").is_file():
        index = json.loads((folder / "model.safetensors.index.json").read_text(encoding="utf-8"))
        for shard in sorted(set(index["weight_map"].values())):
            state.update(_safetensors_load(folder / shard))
    elif (folder / "pytorch_model.bin").is_file():
        path = folder / "pytorch_model.bin"
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise InteropError(f"{path} cannot be read with weights_only=True: {first}") from exc
    else:
        raise InteropError(
            f"{folder} holds config.json but no model.safetensors or pytorch_model.bin"
        )
    return state, config_from_hf(hf_config)


def _namespace_dict(obj: Any) -> dict[str, Any]:
    if obj is None:
        return {}
    if isinstance(obj, argparse.Namespace):
        return vars(obj)
    if isinstance(obj, Mapping):
        return dict(obj)
    return dict(vars(obj)) if hasattr(obj, "__dict__") else {}


def _fairseq_options(ckpt: Mapping[str, Any]) -> dict[str, Any]:
    """Model options of a fairseq checkpoint (``args`` namespace, or ``cfg['model']``)."""
    args = _namespace_dict(ckpt.get("args"))
    if not args and ckpt.get("cfg") is not None:
        cfg = ckpt["cfg"]
        model = cfg.get("model") if isinstance(cfg, Mapping) else getattr(cfg, "model", None)
        args = _namespace_dict(model)
    renames = {"act_dropout": "activation_dropout"}
    return {renames.get(k, k): v for k, v in args.items()}


def _load_file(path: Path, unsafe_load: bool) -> Any:
    if unsafe_load:
        log.warning("reading %s with weights_only=False (trusted files only)", path)
    try:
        return torch.load(path, map_location="cpu", weights_only=not unsafe_load)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if unsafe_load:
            raise InteropError(f"{path} cannot be read: {first}") from exc
        raise InteropError(
            f"{path} cannot be read with weights_only=True (it holds pickled objects such as "
            "fairseq's argparse/omegaconf settings); if you trust the file, read it with "
            "--unsafe-load (unsafe_load=True)"
        ) from exc


def _detect(source: Any) -> Format:
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_dir():
            if (path / "config.json").is_file():
                return "hf"
            raise InteropError(f"{path} is a folder without config.json (not a Hugging Face model)")
        if not path.is_file():
            raise InteropError(f"{path} does not exist")
        return "fairseq"  # a file: fairseq, or this library's checkpoint (told apart on read)
    if hasattr(source, "state_dict") and hasattr(source, "config"):
        return "hf"
    if isinstance(source, Mapping):
        return "hf"
    raise InteropError(f"cannot read a Graphormer from a {type(source).__name__}")


def _build(
    config: GraphormerConfig, state: Mapping[str, Tensor], attention: str, source: str
) -> Graphormer:
    config = replace(config, attention=attention)
    model = Graphormer(config)
    missing, unexpected = model.load_state_dict(dict(state), strict=False)
    missing = [k for k in missing if not k.startswith("encoder.spatial_scale.")]
    if missing or unexpected:
        name = (missing or unexpected)[0]
        raise InteropError(f"{source}: tensor {name} does not fit the converted model")
    return model.eval()


def read_graphormer(
    source: str | os.PathLike | Mapping[str, Tensor] | Any,
    format: Format | None = None,
    attention: Literal["graphormer", "urpe"] | None = None,
    unsafe_load: bool = False,
    options: Mapping[str, Any] | None = None,
) -> PretrainedSource:
    """Read a published Graphormer (format detected unless ``format`` is given).

    Args:
        source: a Hugging Face folder (``config.json`` + ``model.safetensors`` or
            ``pytorch_model.bin``), a Hugging Face ``GraphormerForGraphClassification`` object or
            its state dict, a fairseq checkpoint file, or a checkpoint of this library.
        format: ``hf``, ``fairseq`` or ``graphormer-urpe`` to skip detection.
        attention: ``urpe`` adds URPE's ``C`` tables, every entry 1 (outputs unchanged);
            ``graphormer`` drops them (from a URPE checkpoint of this library); ``None`` keeps
            the source's attention.
        unsafe_load: read a fairseq file with ``torch.load(weights_only=False)`` (only for
            files you trust: fairseq pickles its argparse / omegaconf settings).
        options: Hugging Face config (dict) or fairseq options for a bare state dict, or to
            override what the file records (e.g. ``{"multi_hop_max_dist": 5}``).

    Raises:
        InteropError: the source cannot be read or holds a tensor / option this library cannot
            represent (one line naming it).
    """
    fmt = format or _detect(source)
    name = str(source) if isinstance(source, (str, os.PathLike)) else type(source).__name__
    extra = dict(options or {})
    meta: dict[str, Any] = {}
    if isinstance(source, (str, os.PathLike)) and fmt == "hf":
        state, opts = _read_hf_folder(Path(source))
    elif fmt == "hf":
        if hasattr(source, "state_dict"):
            state, opts = source.state_dict(), config_from_hf(source.config)
        else:
            state, opts = dict(source), {}
    else:
        path = Path(source)
        ckpt = _load_file(path, unsafe_load)
        if not isinstance(ckpt, Mapping):
            raise InteropError(f"{path} holds a {type(ckpt).__name__}, not a checkpoint dict")
        if "format" in ckpt and format in (None, "graphormer-urpe"):
            saved = load_checkpoint(path)
            with incompatible_checkpoint(path):
                model_config = TrainConfig.from_dict(saved["config"]).model
            meta = {k: saved[k] for k in ("featurizer", "target_names", "metric") if k in saved}
            meta["train_config"] = TrainConfig.from_dict(saved["config"])
            meta["dataset"] = meta["train_config"].dataset
            model = _build(model_config, saved["model"], attention or model_config.attention, name)
            return PretrainedSource(model, "graphormer-urpe", [], meta)
        if "model" not in ckpt or not isinstance(ckpt["model"], Mapping):
            raise InteropError(f"{path} has no 'model' state dict (not a fairseq checkpoint)")
        state, opts, fmt = ckpt["model"], _fairseq_options(ckpt), "fairseq"
    opts.update(extra)
    config, mapped, ignored = v2_to_graphormer(state, opts, name, hf_indexing=fmt == "hf")
    if ignored:
        log.info("%s: ignored (unused by its forward pass): %s", name, ", ".join(ignored))
    model = _build(config, mapped, attention or "graphormer", name)
    return PretrainedSource(model, fmt, ignored, meta)


def convert_checkpoint(
    source: str | os.PathLike | Mapping[str, Tensor] | Any,
    out: str | os.PathLike,
    attention: Literal["graphormer", "urpe"] | None = None,
    format: Format | None = None,
    unsafe_load: bool = False,
    options: Mapping[str, Any] | None = None,
    dataset: str | None = None,
    target_names: list[str] | None = None,
    featurizer: str | None = None,
) -> PretrainedSource:
    """Convert published Graphormer weights into a checkpoint of this library at ``out``.

    The checkpoint is the same kind of file training writes (config as JSON, model state,
    featuriser, target names, metric), so ``evaluate``, ``predict`` and ``train --init-from``
    read it. Published PCQM4Mv2 models use OGB features (the default ``featurizer``) and
    predict the HOMO-LUMO gap (default ``dataset="pcqm4mv2"`` for one output).

    Args:
        source, attention, format, unsafe_load, options: as :func:`read_graphormer`.
        out: the checkpoint file to write (atomically).
        dataset: the dataset ``evaluate`` uses by default (``pcqm4mv2`` for one output,
            else ``nci5k``).
        target_names: names of the outputs (``homolumogap`` for ``pcqm4mv2``, else ``y0``, ...).
        featurizer: ``ogb`` (default) or ``zinc``.

    Returns:
        The :class:`PretrainedSource` that was written.
    """
    src = read_graphormer(source, format, attention, unsafe_load, options)
    config = src.model.config
    meta = src.meta
    dataset = dataset or meta.get("dataset") or ("pcqm4mv2" if config.num_targets == 1 else "nci5k")
    if target_names is None:
        target_names = meta.get("target_names")
    if target_names is None:
        if dataset == "pcqm4mv2" and config.num_targets == 1:
            target_names = ["homolumogap"]
        else:
            target_names = [f"y{i}" for i in range(config.num_targets)]
    if len(target_names) != config.num_targets:
        raise ValueError(
            f"{len(target_names)} target names for a model with {config.num_targets} outputs"
        )
    featurizer = featurizer or meta.get("featurizer", "ogb")
    if fit_tables(config, featurizer) != config:
        raise InteropError(
            f"the model's embedding tables are smaller than the {featurizer} featuriser needs "
            f"(num_atoms={config.num_atoms}, num_edges={config.num_edges})"
        )
    base = meta.get("train_config") or TrainConfig(preset="converted")
    train_config = replace(base, dataset=dataset, model=config, featurizer=featurizer)
    save_checkpoint(
        out,
        {
            "config": train_config.to_json(),
            "model": src.model.state_dict(),
            "featurizer": featurizer,
            "target_names": list(target_names),
            "metric": meta.get("metric", "mae"),
            "converted_from": {"format": src.format, "source": str(source)[:500]},
        },
    )
    log.info(
        "wrote %s: %s Graphormer (%d layers, width %d, %d heads, %s, %d outputs) from %s",
        out,
        config.attention,
        config.num_layers,
        config.hidden_dim,
        config.num_heads,
        "pre-LN" if config.pre_ln else "post-LN",
        config.num_targets,
        src.format,
    )
    return src


def export_huggingface(
    source: str | os.PathLike | Graphormer,
    folder: str | os.PathLike,
    graphormer_only: bool = False,
) -> Path:
    """Write a model as a Hugging Face folder (``config.json`` + ``model.safetensors``).

    ``transformers``' ``GraphormerForGraphClassification.from_pretrained(folder)`` loads it.

    Args:
        source: a checkpoint of this library or a :class:`Graphormer`.
        folder: the output folder (created).
        graphormer_only: export a URPE model's plain-Graphormer part (its ``C`` tables are
            left out); without it, URPE models are refused.

    Raises:
        InteropError: the model uses a switch Hugging Face's Graphormer does not have.
    """
    model = read_graphormer(source).model if not isinstance(source, Graphormer) else source
    config = model.config
    if graphormer_only:
        config = replace(config, attention="graphormer")
    hf_config = config_to_hf(config)
    state = graphormer_to_hf_state(model, graphormer_only=graphormer_only)
    try:
        from safetensors.torch import save_file
    except ImportError as exc:
        raise ImportError("writing model.safetensors needs the safetensors package") from exc
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / ".model.safetensors.tmp"
    save_file(state, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, folder / "model.safetensors")
    write_atomic(folder / "config.json", json.dumps(hf_config, indent=2, sort_keys=True))
    log.info("wrote %s (config.json + model.safetensors, %d tensors)", folder, len(state))
    return folder


@dataclass
class InitReport:
    """What :func:`init_from_checkpoint` did with every tensor (state-dict names)."""

    loaded: list[str]
    initialised: list[str]
    ignored: list[str]

    def to_dict(self) -> dict[str, list[str]]:
        return {"loaded": self.loaded, "initialised": self.initialised, "ignored": self.ignored}


_RUN_FIELDS = ("dropout", "attention_dropout", "input_dropout", "activation_dropout", "attention")
"""Fields a fine-tuning run takes from its own config; the architecture comes from the
checkpoint (URPE's ``urpe_*`` too when the checkpoint has C tables)."""


def check_init_source(path: str | os.PathLike) -> None:
    """Fail at once, before any data is loaded, when ``--init-from`` cannot be read: a path
    that does not exist, a folder that is neither a Hugging Face model folder nor holds a
    checkpoint, or a file that is not a checkpoint (shipped names such as ``pretrained``
    resolve first).

    Raises:
        CheckpointError: naming what is wrong and what to give instead.
    """
    p = resolve_checkpoint(path)
    if p.is_dir():
        if not (p / "config.json").is_file():  # (a Hugging Face folder holds config.json)
            raise CheckpointError(f"--init-from: {folder_problem(p)}, or a Hugging Face folder")
        return
    if not p.exists():
        shipped = ", ".join(repr(n) for n in SHIPPED)
        raise CheckpointError(
            f"--init-from {path}: no such file or folder (give a checkpoint file, a Hugging "
            f"Face folder, or a shipped name: {shipped})"
        )
    load_checkpoint(p)  # a readable checkpoint of this library, or a one-line error


def init_from_checkpoint(
    path: str | os.PathLike,
    run: GraphormerConfig,
    featurizer: str,
    num_targets: int,
    num_mol_features: int = 0,
) -> tuple[Graphormer, InitReport]:
    """A model for a fine-tuning run, initialised from the checkpoint at ``path`` (a
    checkpoint of this library, e.g. from :func:`convert_checkpoint`, or a Hugging Face folder).

    The architecture (sizes, tables, hops, layer-norm placement, head) is the checkpoint's;
    dropouts and ``attention`` are the run's (``urpe`` on a plain checkpoint adds C tables at
    1, newly initialised); the number of outputs is the dataset's. Every tensor whose name and
    shape match is loaded; the head's output layer is re-initialised when the number of
    outputs differs, and always for a pretraining checkpoint (``graphormer-urpe pretrain``:
    its outputs are descriptors, never the new task's targets), whose head kind is then the
    run's (``--head``). The whole head is re-initialised when its input changes
    (``num_mol_features`` per-molecule features joined to the graph token, ``--mol-features``).

    Raises:
        CheckpointError: the file is not a readable checkpoint, or a tensor other than the
            output layer has another shape than the run's model needs.
        ValueError: the checkpoint's tables are too small for the dataset's featuriser.
    """
    state: Mapping[str, Tensor]
    pretrained = False  # a self-supervised pretraining checkpoint: its head is never kept
    if Path(path).is_dir():  # a Hugging Face folder, converted on the fly
        source = read_graphormer(path)
        saved, state = source.model.config, source.model.state_dict()
    else:
        ckpt = load_checkpoint(path)
        with incompatible_checkpoint(path):
            saved = TrainConfig.from_dict(ckpt["config"]).model
        state = ckpt["model"]
        pretrained = ckpt.get("pretrain") is not None
    take = {f: getattr(run, f) for f in _RUN_FIELDS}
    if saved.attention != "urpe":
        take.update(urpe_num_buckets=run.urpe_num_buckets, urpe_share_layers=run.urpe_share_layers)
    if pretrained:  # its head is never kept: the run chooses one
        take["head"] = run.head
    if saved.num_targets != num_targets:  # another task: the run decides its own scaling
        take.update(target_mean=None, target_std=None)
    config = replace(saved, num_targets=num_targets, num_mol_features=num_mol_features, **take)
    grown = fit_tables(config, featurizer)
    if grown != config:
        diff = [f.name for f in fields(config) if getattr(grown, f.name) != getattr(config, f.name)]
        raise ValueError(
            f"--init-from {path}: its tables are too small for {featurizer} features "
            f"({', '.join(f'{k}={getattr(config, k)}' for k in diff)})"
        )
    model = Graphormer(config)
    own = model.state_dict()
    head_out = set(model.head_output_names())
    new_input = saved.num_mol_features != num_mol_features or saved.head != config.head
    if new_input:  # the whole head
        head_out = {name for name in own if name.startswith("head.")}
    new_outputs = saved.num_targets != num_targets or pretrained or new_input
    take_state: dict[str, Tensor] = {}
    loaded: list[str] = []
    initialised: list[str] = []
    for name, tensor in own.items():
        src = state.get(name)
        if src is None or (new_outputs and name in head_out):
            initialised.append(name)
            continue
        if src.shape != tensor.shape:
            raise CheckpointError(
                f"--init-from {path}: tensor {name} has shape {tuple(src.shape)}, the model "
                f"needs {tuple(tensor.shape)}"
            )
        take_state[name] = src
        loaded.append(name)
    ignored = [name for name in state if name not in own]
    model.load_state_dict(take_state, strict=False)
    report = InitReport(loaded, initialised, ignored)
    log.info(
        "--init-from %s: loaded %d tensors, newly initialised %d, ignored %d%s (their names "
        "at debug level: -v)",
        path,
        len(loaded),
        len(initialised),
        len(ignored),
        f" (the head's output layer: {saved.num_targets} -> {num_targets} outputs"
        f"{', a pretraining head' if pretrained else ''}"
        f"{f', a {config.head} head on d + {num_mol_features} inputs' if new_input else ''})"
        if new_outputs
        else "",
    )
    log.debug("loaded: %s", ", ".join(loaded))
    log.debug("newly initialised: %s", ", ".join(initialised) or "none")
    log.debug("ignored: %s", ", ".join(ignored) or "none")
    return model, report

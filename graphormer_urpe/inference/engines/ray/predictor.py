r"""A trained model as a callable class for Ray Data's ``Dataset.map_batches``.

:class:`Predictor` adds ``predict``'s columns to each batch of a dataset that has a SMILES
column: one column per target (``prob_`` / ``logit_`` prefixed for binary tasks), for an
ensemble ``<column>_std``, with ``interval`` ``<target>_low`` and ``<target>_high``, then
``domain``, ``nearest_similarity`` and ``error``, and with ``embeddings`` the vector the
head reads (``embedding``, ``[D]`` float32 per row). The numbers are those of local
``predict``, from the same code (:class:`~graphormer_urpe.inference.engines.stream.StreamModel`
featurises the batch and runs the model, :class:`~graphormer_urpe.inference.engines.predict_io.
PredictionLayout` gives the columns); a row that cannot be read keeps its place with NaN
values, an empty ``domain`` and the reason in ``error``.

Each actor holds one copy of the model, on its GPU where it has one (``num_gpus=1``), where
batches go through the forward pass captured per batch shape. This module does not import
Ray; the class needs nothing of it. Example::

    import ray
    from graphormer_urpe.inference import Predictor

    ds = ray.data.read_parquet("s3://bucket/library/")
    ds = ds.map_batches(Predictor, fn_constructor_args=("best.pt",), batch_size=4096,
                        compute=ray.data.ActorPoolStrategy(size=8),
                        num_cpus=1)                      # num_gpus=1 for one GPU per actor
    ds.write_parquet("s3://bucket/predictions/")
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ....runtime.run_inputs import resolve_device
from ...embeddings import embedding_dim
from ...loading import LoadedModel
from ..defaults import DEFAULT_BATCH_SIZE, DEFAULT_CHUNK_SIZE
from ..predict_io import Prediction, PredictionLayout
from ..stream import Featurizing, StreamModel, loaded_models

if TYPE_CHECKING:
    from ...intervals.calibration import Calibration

__all__ = [
    "FeaturizedPredictor",
    "Predictor",
    "featurize_block",
    "output_layout",
    "prediction_columns_of",
]


def output_layout(
    models: Sequence[LoadedModel],
    calibration: Calibration | None = None,
    level: float | None = None,
    logits: bool = False,
    names: bool = False,
) -> PredictionLayout:
    """The layout of ``predict``'s output for ``models`` (the domain columns always)."""
    loaded = models[0]
    binary = loaded.task_type == "binary"
    if logits and not binary:
        raise ValueError("logits applies to binary tasks; this model predicts regression targets")
    return PredictionLayout(
        loaded.target_names,
        binary=binary,
        logits=logits,
        std=len(models) > 1,
        domain=True,
        names=names,
        calibration=calibration,
        level=level,
    )


def prediction_columns_of(
    layout: PredictionLayout,
    predictions: Iterable[Prediction],
    rows: int,
    embedding_dim: int | None = None,
) -> dict[str, np.ndarray]:
    """``rows`` predictions (``p.index`` in ``0..rows - 1``) as columns: ``[rows]`` float64
    per :attr:`~graphormer_urpe.inference.engines.predict_io.PredictionLayout.value_columns` (NaN:
    unreadable), ``domain`` and ``error`` (str, ``""``: none), ``nearest_similarity``
    (float64, NaN: none), and with ``embedding_dim`` ``embedding`` ``[rows, D]`` float32."""
    values = np.full((rows, len(layout.value_columns)), math.nan)
    domain = np.full(rows, "", dtype=object)
    error = np.full(rows, "", dtype=object)
    similarity = np.full(rows, math.nan)
    embedding = None
    if embedding_dim is not None:
        embedding = np.full((rows, embedding_dim), math.nan, dtype=np.float32)
    for p in predictions:
        i = p.index
        if p.values is None:
            error[i] = p.error or ""
            continue
        values[i] = layout.numbers(p)
        label, sim = layout.domain_of(p)
        domain[i] = label
        if sim is not None:
            similarity[i] = sim
        if embedding is not None and p.embedding is not None:
            embedding[i] = p.embedding.numpy()
    out = {name: values[:, j] for j, name in enumerate(layout.value_columns)}
    out |= {"domain": domain, "nearest_similarity": similarity, "error": error}
    if embedding is not None:
        out["embedding"] = embedding
    return out


def _parts(smiles: list[str]) -> list[tuple[int, list[str]]]:
    """``smiles`` in chunks of :data:`DEFAULT_CHUNK_SIZE`, each with its first row: a block
    featurised a chunk at a time takes less memory, and less time (0.72 CPU ms per MOSES
    molecule in chunks of 1,000, 0.80 in one chunk of 4,096: the nearest-similarity search
    of a smaller chunk stays in the caches); the windows of the model span the chunks."""
    size = DEFAULT_CHUNK_SIZE
    return [(i, smiles[i : i + size]) for i in range(0, len(smiles), size)]


class Predictor:
    """Adds ``predict``'s columns to a batch of SMILES (see the module's text).

    Args:
        model: a checkpoint path, an ensemble folder, or loaded model(s) (moved to
            ``device``); a path is read where the actor runs.
        smiles_column: the batch's SMILES column.
        device: ``auto`` (the actor's GPU where it has one, else the CPU), ``cpu``, ``cuda``.
        batch_size: valid molecules per forward pass.
        similarity: search each molecule's nearest training fingerprint.
        embeddings: add the ``embedding`` column.
        interval: a regression's interval level (``0.9``): ``<target>_low`` and
            ``<target>_high`` from the run's calibrator.
        logits: binary tasks: raw scores (``logit_<task>``) instead of probabilities.
        calibration: the calibrator (default: the one kept beside a checkpoint path).
        threads: torch threads of the process (default: left as they are; Ray gives an
            actor as many as its CPUs).
    """

    def __init__(
        self,
        model: str | Path | LoadedModel | list[LoadedModel],
        *,
        smiles_column: str = "smiles",
        device: str = "auto",
        batch_size: int = DEFAULT_BATCH_SIZE,
        similarity: bool = True,
        embeddings: bool = False,
        interval: float | None = None,
        logits: bool = False,
        calibration: Calibration | None = None,
        threads: int | None = None,
    ) -> None:
        if threads is not None:
            torch.set_num_threads(threads)
        models = loaded_models(model, device)
        if isinstance(model, (str, Path)) and calibration is None:
            from ...intervals.calibration import check_interval_request

            loaded = models[0]
            calibration = check_interval_request(
                model, interval, loaded.task_type, loaded.target_names
            )
        elif interval is not None and calibration is None:
            raise ValueError("an interval needs the run's calibrator (calibration=...)")
        if interval is not None and calibration is not None and calibration.needs_similarity:
            similarity = True  # its intervals are scaled by the distance to the training set
        dev = resolve_device(device)
        models = [
            m if m.device == dev else replace(m, model=m.model.to(dev), device=dev) for m in models
        ]
        self.smiles_column = smiles_column
        self.layout = output_layout(models, calibration, interval, logits)
        self.stream = StreamModel(
            models, batch_size=batch_size, similarity=similarity, embeddings=embeddings
        )
        self.embedding_dim = embedding_dim([m.model for m in models]) if embeddings else None

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``batch`` with the prediction columns added (see the module's text)."""
        smiles = ["" if s is None else str(s) for s in batch[self.smiles_column].tolist()]
        chunks = [self.stream.featurize(part, first) for first, part in _parts(smiles)]
        predictions = self.stream.predict(chunks)
        columns = prediction_columns_of(self.layout, predictions, len(smiles), self.embedding_dim)
        return {**batch, **columns}


# --------------------------------------------------------------------------------------
# Featurising in CPU tasks, the model in GPU actors
# --------------------------------------------------------------------------------------


FEATURIZED = "featurized"
"""The column of :func:`featurize_block`'s one row: the block, featurised and packed."""


def featurize_block(
    batch: dict[str, np.ndarray], featurizing: Featurizing, smiles_column: str = "smiles"
) -> dict[str, np.ndarray]:
    """A block's molecules featurised (a CPU task: a GPU actor then only runs the model),
    packed with the block's columns into one row of bytes (:data:`FEATURIZED`): the graphs
    cross the object store as a few large arrays, not as a Python object per molecule."""
    smiles = ["" if s is None else str(s) for s in batch[smiles_column].tolist()]
    chunks = [featurizing(part, first) for first, part in _parts(smiles)]
    packed = pickle.dumps((batch, chunks), protocol=5)
    return {FEATURIZED: np.array([packed], dtype=object)}


class FeaturizedPredictor(Predictor):
    """:class:`Predictor` of blocks that :func:`featurize_block` featurised: each row of a
    batch unpacks to a block, which leaves with the prediction columns added (the same
    columns as :class:`Predictor`'s)."""

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The blocks packed in ``batch``, predicted and joined."""
        parts = []
        for packed in batch[FEATURIZED].tolist():
            block, chunks = pickle.loads(packed)  # made by featurize_block in this run
            predictions = self.stream.predict(chunks)
            n = sum(len(c.smiles) for c in chunks)
            columns = prediction_columns_of(self.layout, predictions, n, self.embedding_dim)
            parts.append({**block, **columns})
        if len(parts) == 1:
            return parts[0]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

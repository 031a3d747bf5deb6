"""Pretrained v2: descriptor pretraining on MOSES, fed by the GPU machine's cores, resumable.

A GPU call lasts at most 10 minutes, carries at most 64 MiB in and brings at most 8 files of
16 MiB back, and the machine is bare at every start. So the run is made of calls, each one
command (``tools/device/pretrain_v2.sh``), and each call:

* unpacks the carried SMILES shards (``pack`` wrote them: xz, one SMILES a line, sorted
  within a shard, molecules assigned to shards at random) and featurises them with the
  machine's cores in a separate process (``featurize``): graphs and the 202 RDKit 2D
  descriptors, one store per shard, the validation shard first, then the training shards that
  earlier calls drew least from;
* trains from the first ready shard on: every batch is drawn from the shards ready so far,
  each new shard's molecules shuffled into what is left of the current pass, and a pass over
  the ready shards starts again when they are used up, so the GPU never waits for the
  descriptors;
* stops at ``--time-limit`` (minus ``--reserve`` for the end), validates on the fixed
  validation shard, and writes the state that the next call needs under ``--out``: the model's
  weights (float32), AdamW's second moments (bfloat16; the first moments, which a few
  steps rebuild, are not kept), the step, the learning-rate schedule, the descriptors'
  normalisation and how often each shard was drawn, split into parts of at most 15 MiB
  (:mod:`graphormer_urpe.io.parts`), plus ``progress.json`` (every call so far) and
  ``log.txt``.

The next call reads that state from ``--state`` (copy what came back there) and goes on. The
order of the batches is not reproduced across calls (it follows the shards' readiness); the
state is. ``export`` turns the state into a checkpoint that ``train --init-from`` and
``scripts/ship_pretrained.py`` read. Commands (docs/guides/pretraining.md, "Pretrained v2")::

    python scripts/pretrain_v2.py pack --source moses_train_minus_shared.smi --out DATA
    python scripts/pretrain_v2.py run --data DATA --state STATE --out OUT --time-limit 540
    python scripts/pretrain_v2.py export --state STATE --out best.pt

Prints one JSON object (``run``: what the call did).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import lzma
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

STARTED = time.perf_counter()  # --time-limit counts from here (torch is imported later)

MODEL = dict(
    num_layers=10,
    hidden_dim=256,
    ffn_dim=256,
    num_heads=8,
    attention="urpe",
    dropout=0.0,
    input_dropout=0.0,
    attention_dropout=0.1,
    multi_hop_max_dist=5,
)
"""The v2 model (on the ``small`` preset, OGB-sized tables): 5.5M parameters with 202 outputs."""
STATE = "state"  # the parts' stem
PROGRESS = "progress.json"
VALID = "valid"
SHARD_BITS = 24  # a molecule's id: shard index << SHARD_BITS | position in the shard
READ_EVERY = 50  # steps between two reads of the device totals
LOG = logging.getLogger("pretrain_v2")


# -- pack: SMILES -> shards ----------------------------------------------------------------


def _read_lines(path: Path) -> list[str]:
    from graphormer_urpe.datasets.sources.pretrain import read_smiles_list

    return [s for s in read_smiles_list(path)[0] if s]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shard_name(k: int) -> str:
    """The name of training shard ``k``."""
    return f"train-{k:03d}"


def pack(
    sources: Sequence[Path],
    out: Path,
    shards: int,
    valid: int,
    seed: int = 0,
    limit: int | None = None,
) -> dict[str, Any]:
    """Write the SMILES of ``sources`` (duplicates dropped) as ``valid.smi.xz`` (``valid``
    molecules) and ``shards`` training shards ``train-<k>.smi.xz``, molecules assigned at
    random (``seed``), sorted within a shard (it compresses better); ``limit``: the first
    molecules of the shuffled set only (a slice for a CPU run). Returns the manifest (also
    written as ``manifest.json``)."""
    from graphormer_urpe.io.files import write_atomic

    smiles: list[str] = []
    counts = {}
    for src in sources:
        got = _read_lines(src)
        counts[src.name] = len(got)
        smiles += got
    unique = list(dict.fromkeys(smiles))
    order = np.random.default_rng(seed).permutation(len(unique))
    if limit is not None:
        order = order[:limit]
    if valid >= len(order):
        raise ValueError(f"{len(order)} molecules leave none for training after {valid} valid")
    groups = {VALID: order[:valid]}
    rest = order[valid:]
    for k in range(shards):
        groups[shard_name(k)] = rest[k::shards]
    out.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, idx in groups.items():
        text = "".join(s + "\n" for s in sorted(unique[i] for i in idx))
        path = out / f"{name}.smi.xz"
        write_atomic(path, lzma.compress(text.encode(), preset=6 | lzma.PRESET_EXTREME))
        files[name] = {"file": path.name, "molecules": len(idx), "bytes": path.stat().st_size}
        files[name]["sha256"] = _sha256(path)
    manifest = {
        "sources": counts,
        "duplicates_dropped": len(smiles) - len(unique),
        "molecules": len(order),
        "seed": seed,
        "valid": VALID,
        "shards": files,
        "bytes": sum(f["bytes"] for f in files.values()),
    }
    write_atomic(out / "manifest.json", json.dumps(manifest, indent=1))
    return manifest


# -- featurize: shards -> stores (a process of its own) ------------------------------------


def _read_json(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return default


def ready_path(work: Path, data: Path) -> Path:
    """``work/ready-<hash of data's manifest>.json``: the shards of ``data`` featurised so far."""
    digest = hashlib.sha256((data / "manifest.json").read_bytes()).hexdigest()[:12]
    return work / f"ready-{digest}.json"


def featurize(data: Path, work: Path, order: Sequence[str], workers: int) -> None:
    """Build the store (graphs + descriptors) of each shard in ``order``, with ``workers``
    processes, and record each finished one in :func:`ready_path` (name -> store folder,
    molecules); a store already built in ``work`` (an earlier call on this machine) is reused."""
    from graphormer_urpe.datasets.featurizers.descriptors import descriptor_set_id
    from graphormer_urpe.datasets.store import MoleculeStore
    from graphormer_urpe.datasets.store.build import build_molecule_store
    from graphormer_urpe.datasets.store.format import store_is_complete
    from graphormer_urpe.datasets.store.location import store_folder
    from graphormer_urpe.io.files import write_atomic

    manifest = json.loads((data / "manifest.json").read_text())
    ready_file = ready_path(work, data)
    ready = _read_json(ready_file, {})
    for name in order:
        entry = manifest["shards"][name]
        identity = {"sha256": entry["sha256"], "descriptors": descriptor_set_id()}
        folder = store_folder("pretrain_v2", name, identity, work / "stores")
        t0 = time.perf_counter()
        reused = store_is_complete(folder)  # built by an earlier call on this machine
        text = lzma.decompress((data / entry["file"]).read_bytes()).decode()
        smiles = text.splitlines()
        chunk = max(256, math.ceil(len(smiles) / (2 * workers)))  # every worker busy
        build_molecule_store(
            folder,
            smiles,
            np.zeros((len(smiles), 0)),
            target_names=(),
            featurizer="ogb",
            descriptors=True,
            workers=workers,
            chunk_size=chunk,
            progress=False,
            description=name,
        )
        cache = MoleculeStore(folder)
        ready[name] = {
            "store": str(folder),
            "molecules": len(cache),
            "unreadable": len(cache.failures),
            "seconds": round(time.perf_counter() - t0, 2),
            "reused": reused,
        }
        write_atomic(ready_file, json.dumps(ready, indent=1))


# -- the data a call trains on -------------------------------------------------------------


class ShardedDescriptors:
    """The molecules of the ready shards, addressed by id ``shard << 24 | position``; each
    graph's ``y`` is its normalised descriptors ``[1, K]``. Stores are opened on first use in
    each process (loader workers included), their folders read from ``ready`` (the file
    :func:`featurize` writes)."""

    def __init__(self, ready: Path, names: Sequence[str], normalizer: Any, hops: int) -> None:
        self.ready, self.names, self.normalizer, self.hops = ready, list(names), normalizer, hops
        self._sets: dict[int, Any] = {}

    def __len__(self) -> int:  # the batch sampler decides what is read
        return 1 << 62

    def shard(self, k: int) -> Any:
        """Shard ``k``'s :class:`~graphormer_urpe.datasets.sources.pretrain.DescriptorTargets`."""
        if k not in self._sets:
            from graphormer_urpe.datasets.sources.pretrain import DescriptorTargets
            from graphormer_urpe.datasets.store import MoleculeStore

            entry = _read_json(self.ready, {})[self.names[k]]
            cache = MoleculeStore(entry["store"])
            positions = np.arange(len(cache), dtype=np.int64)
            self._sets[k] = DescriptorTargets(
                cache, positions, self.hops, self.names[k], normalizer=self.normalizer
            )
        return self._sets[k]

    def __getitems__(self, ids: Sequence[int]) -> list[Any]:
        ids = np.asarray(ids, dtype=np.int64)
        shards, positions = ids >> SHARD_BITS, ids & ((1 << SHARD_BITS) - 1)
        out: list[Any] = [None] * len(ids)
        for k in np.unique(shards).tolist():
            where = np.flatnonzero(shards == k)
            for i, g in zip(
                where, self.shard(k).__getitems__(positions[where].tolist()), strict=True
            ):
                out[i] = g
        return out

    def __getitem__(self, idx: int) -> Any:
        return self.__getitems__([idx])[0]


class StreamSampler:
    """Batches of ``batch_size`` ids from the shards ready so far (``ready()``: name ->
    molecules), forever: a new shard's molecules are shuffled into what is left of the
    current pass, and when that is used up a new pass over every ready shard starts. Counts
    the molecules drawn per shard (``drawn``) and the passes started (``passes``)."""

    def __init__(
        self,
        ready: Callable[[], dict[str, int]],
        names: Sequence[str],
        batch_size: int,
        seed: int,
        refresh_seconds: float = 1.0,
        wait: Callable[[], None] = lambda: time.sleep(0.2),
    ) -> None:
        self.ready, self.names, self.batch_size = ready, list(names), batch_size
        self.rng = np.random.default_rng(seed)
        self.refresh_seconds, self.wait = refresh_seconds, wait
        self.drawn = dict.fromkeys(self.names, 0)
        self.known: dict[str, int] = {}
        self.passes = 0

    def _ids(self, name: str) -> np.ndarray:
        k = self.names.index(name)
        return (np.int64(k) << SHARD_BITS) | np.arange(self.known[name], dtype=np.int64)

    def __iter__(self) -> Iterator[list[int]]:
        pending = np.empty(0, dtype=np.int64)
        checked = -math.inf
        while True:
            now = time.monotonic()
            if now - checked >= self.refresh_seconds or len(pending) < self.batch_size:
                checked = now
                ready = self.ready()
                new = [n for n in ready if n in self.drawn and n not in self.known]
                for name in new:
                    self.known[name] = ready[name]
                if new:
                    fresh = np.concatenate([pending, *[self._ids(n) for n in new]])
                    pending = self.rng.permutation(fresh)
            if len(pending) < self.batch_size:
                if sum(self.known.values()) < self.batch_size:
                    self.wait()  # not one batch ready yet
                    continue
                again = np.concatenate([self._ids(n) for n in self.known])
                pending = np.concatenate([pending, self.rng.permutation(again)])
                self.passes += 1
            batch, pending = pending[: self.batch_size], pending[self.batch_size :]
            shards = batch >> SHARD_BITS
            for k, c in zip(*np.unique(shards, return_counts=True), strict=True):
                self.drawn[self.names[int(k)]] += int(c)
            yield batch.tolist()


# -- the state carried between calls -------------------------------------------------------


def model_config(featurizer: str = "ogb", **overrides: Any) -> Any:
    """The v2 model's :class:`~graphormer_urpe.graph.model_config.GraphormerConfig`."""
    from graphormer_urpe.graph.model_config import fit_tables, get_preset

    return fit_tables(get_preset("small", **{**MODEL, **overrides}), featurizer)


def compact_optimizer_state(optimizer: Any) -> dict[str, Any]:
    """AdamW's state to carry: ``exp_avg_sq`` in bfloat16 and the step, ``exp_avg`` dropped
    (learning rates as floats, ``capturable`` off)."""
    from graphormer_urpe.runtime.capture import portable_optimizer_state

    full = portable_optimizer_state(optimizer)
    state = {
        k: {"step": v["step"], "exp_avg_sq": v["exp_avg_sq"].to("cpu", dtype=_bf16())}
        for k, v in full["state"].items()
    }
    return {"state": state, "param_groups": full["param_groups"]}


def _bf16() -> Any:
    import torch

    return torch.bfloat16


def full_optimizer_state(compact: dict[str, Any]) -> dict[str, Any]:
    """The ``optimizer.load_state_dict`` form of :func:`compact_optimizer_state`'s output:
    ``exp_avg`` zeros, ``exp_avg_sq`` back in float32."""
    import torch

    state = {}
    for k, v in compact["state"].items():
        sq = v["exp_avg_sq"].float()
        state[k] = {"step": v["step"], "exp_avg": torch.zeros_like(sq), "exp_avg_sq": sq}
    return {"state": state, "param_groups": compact["param_groups"]}


class Trainer:
    """The model, AdamW, its schedule and the step of the run, built new or from a state."""

    def __init__(
        self,
        config: Any,
        num_targets: int,
        device: Any,
        precision: str,
        lr: float,
        warmup: int,
        total_steps: int,
        weight_decay: float = 0.01,
        seed: int = 0,
        capture: bool = True,
    ) -> None:
        import torch

        from graphormer_urpe.runtime.capture import CapturedStep, default_backend
        from graphormer_urpe.runtime.precision import Precision
        from graphormer_urpe.runtime.run_inputs import build_model
        from graphormer_urpe.training.pacing import Schedule
        from graphormer_urpe.training.steps import (
            StepTotals,
            make_optimizer,
            parameter_groups,
            step_body,
        )

        torch.manual_seed(seed)
        self.device = device
        self.model = build_model(config, "ogb", num_targets).to(device)
        self.precision = Precision(precision, device)
        groups = parameter_groups(self.model, weight_decay, weight_decay)
        self.optimizer = make_optimizer(groups, lr, weight_decay)
        self.schedule = Schedule(warmup, total_steps, lr, 0.0)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(  # base rate: the schedule's peak
            self.optimizer, lambda s: self.schedule(s) / self.schedule.peak
        )
        self.totals = StepTotals(device)
        self.step = 0
        self.backend = default_backend(device) if capture else None

        def body(batch: Any, set_to_none: bool, step: Any) -> Any:
            return step_body(
                self.model, batch, self.optimizer, self.precision, self.totals, step,
                "smooth_l1", None, None, set_to_none, autocast_cache=set_to_none,
            )  # fmt: skip

        self.stepper = CapturedStep(
            self.optimizer, self.scheduler, body, device, self.backend, keep=self.totals.tensors()
        )

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def collator(self, batch_size: int) -> Any:
        """The collate function: static shapes of ``batch_size`` graphs when steps are captured."""
        from graphormer_urpe.runtime.loaders import make_collator

        static = batch_size if self.backend is not None else None
        return make_collator(self.model.config, self.device, static)

    def train_step(self, batch: Any) -> None:
        """One AdamW step on ``batch`` (the stepper copies it to the device)."""
        self.model.train()
        self.stepper(batch, self.step)
        self.step += 1

    def state(self) -> dict[str, Any]:
        """What the next call needs of the model and the optimizer."""
        from graphormer_urpe.training.run_checkpoints import portable_state

        return {
            "model_config": self.model.config.to_dict(),
            "model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            "optimizer": compact_optimizer_state(self.optimizer),
            "scheduler": portable_state(self.scheduler.state_dict()),
            "schedule": self.schedule.state(),
            "step": self.step,
        }

    def restore(self, state: dict[str, Any], total_steps: int | None = None) -> None:
        """Continue from :meth:`state`'s output; ``total_steps``: end the schedule's decay
        there instead (from the rate it has reached)."""
        from graphormer_urpe.training.pacing import Schedule

        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(full_optimizer_state(state["optimizer"]))
        self.scheduler.load_state_dict(state["scheduler"])
        self.schedule = Schedule.from_state(state["schedule"])
        self.step = int(state["step"])
        if total_steps is not None and total_steps != self.schedule.total:
            self.schedule.replan(self.step, total_steps)
        for group in self.optimizer.param_groups:  # the schedule's rate at this step
            group["lr"] = self.schedule(self.step)


def validate(trainer: Trainer, dataset: Any, batch_size: int) -> dict[str, float]:
    """Mean MAE, RMSE and R² over the descriptors of ``dataset`` (normalised units)."""
    from graphormer_urpe.datasets.sources.pretrain import descriptor_metrics
    from graphormer_urpe.inference.prediction import predict_dataset

    trainer.model.eval()
    pred, y = predict_dataset(trainer.model, dataset, batch_size, trainer.device, trainer.precision)
    return {k: round(v, 5) for k, v in descriptor_metrics(pred, y).items()}


# -- run: one call ---------------------------------------------------------------------------


def _ready_counts(ready: Path) -> dict[str, int]:
    return {n: e["molecules"] for n, e in _read_json(ready, {}).items()}


def _wait_for(ready: Path, names: Sequence[str], featurizer: subprocess.Popen, deadline: float):
    while not set(names) <= set(_ready_counts(ready)):
        if featurizer.poll() is not None:
            raise RuntimeError(f"the featurising process ended ({featurizer.returncode}) early")
        if time.perf_counter() > deadline:
            raise TimeoutError(
                f"{', '.join(names)} not featurised within the time limit: nothing was trained "
                "and the state is unchanged (give more --featurize-workers or a longer limit)"
            )
        time.sleep(0.2)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """One call: see the module docstring. Returns its report."""
    import torch
    from torch.utils.data import DataLoader

    from graphormer_urpe.datasets.featurizers.descriptors import (
        DESCRIPTOR_NAMES,
        DescriptorNormalizer,
    )
    from graphormer_urpe.datasets.sources.pretrain import DescriptorTargets
    from graphormer_urpe.datasets.store import MoleculeStore
    from graphormer_urpe.graph.model_config import GraphormerConfig
    from graphormer_urpe.io.files import write_atomic
    from graphormer_urpe.io.parts import load_from_parts, parts_manifest, save_in_parts
    from graphormer_urpe.runtime.run_inputs import resolve_device

    started = STARTED
    stop_at = started + args.time_limit - args.reserve
    device = resolve_device(args.device)
    data, work, out = Path(args.data), Path(args.work), Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((data / "manifest.json").read_text())
    names = sorted(n for n in manifest["shards"] if n != VALID)
    state_dir = Path(args.state) if args.state else None
    state = None
    if state_dir is not None and parts_manifest(state_dir, STATE) is not None:
        state = load_from_parts(state_dir, STATE)
    progress = _read_json(state_dir / PROGRESS, {}) if state_dir else {}
    calls = progress.get("calls", [])
    drawn_before = dict.fromkeys(names, 0) | progress.get("drawn", {})
    # least drawn shards first (ties in name order), the validation shard before them all
    order = [VALID] + sorted(names, key=lambda n: (drawn_before[n], n))
    cores = os.cpu_count() or 2
    feat_workers = args.featurize_workers or max(1, cores - args.loader_workers - 1)
    ready_file = ready_path(work, data)
    if args.threads:
        torch.set_num_threads(args.threads)
    with open(out / "log.txt", "a") as log_file:  # a session of its own: stopped as a group
        cmd = [sys.executable, str(Path(__file__).resolve()), "featurize", "--data", str(data)]
        cmd += ["--work", str(work), "--workers", str(feat_workers), "--order", *order]
        featurizer = subprocess.Popen(cmd, stdout=log_file, stderr=log_file, start_new_session=True)
    try:
        seed = args.seed + len(calls)  # another data order and dropout at every call
        total_steps = args.total_steps
        if state is not None:
            config = GraphormerConfig.from_dict(state["model_config"])
        else:
            config = model_config(num_layers=args.layers, hidden_dim=args.width,
                                  ffn_dim=args.width, num_heads=args.heads)  # fmt: skip
        trainer = Trainer(
            config, len(DESCRIPTOR_NAMES), device,
            args.precision, args.lr, args.warmup, total_steps, seed=seed,
            capture=not args.no_capture,
        )  # fmt: skip
        if state is not None:
            trainer.restore(state, total_steps if args.replan else None)
        t_model = time.perf_counter() - started
        _wait_for(ready_file, [VALID, order[1]], featurizer, stop_at)
        t_first = time.perf_counter() - started
        ready = _read_json(ready_file, {})
        if state is not None:
            normalizer = DescriptorNormalizer.from_dict(state["descriptors"])
        else:  # fitted once, on the first training shard, and carried from then on
            cache = MoleculeStore(ready[order[1]]["store"])
            normalizer = DescriptorNormalizer.fit(cache.descriptors[:], cache.descriptor_names)
        valid_cache = MoleculeStore(ready[VALID]["store"])
        valid_set = DescriptorTargets(
            valid_cache, np.arange(len(valid_cache)), config.multi_hop_max_dist, VALID,
            normalizer=normalizer,
        )  # fmt: skip
        dataset = ShardedDescriptors(ready_file, names, normalizer, config.multi_hop_max_dist)
        sampler = StreamSampler(
            lambda: {n: m for n, m in _ready_counts(ready_file).items() if n != VALID},
            names,
            args.batch_size,
            seed,
        )
        loader = DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=trainer.collator(args.batch_size),
            num_workers=args.loader_workers,
            pin_memory=device.type == "cuda",
            prefetch_factor=4 if args.loader_workers else None,
        )
        step0, losses, steps_read = trainer.step, 0.0, 0
        t_train = time.perf_counter()
        wait = 0.0
        fetch = time.perf_counter()
        for batch in loader:
            wait += time.perf_counter() - fetch
            trainer.train_step(batch)
            if args.max_steps is not None and trainer.step - step0 >= args.max_steps:
                break
            time_up = time.perf_counter() >= stop_at  # the host's clock: no device read
            if time_up or (trainer.step - step0) % READ_EVERY == 0:
                part, count, bad = trainer.totals.read()
                trainer.totals.reset()
                if bad >= 0:
                    raise RuntimeError(f"non-finite loss at step {bad}; lower --lr")
                losses, steps_read = losses + part, steps_read + count
                if time_up:
                    break
            fetch = time.perf_counter()
        part, count, bad = trainer.totals.read()
        if bad >= 0:
            raise RuntimeError(f"non-finite loss at step {bad}; lower --lr")
        losses, steps_read = losses + part, steps_read + count
        del loader
        train_seconds = time.perf_counter() - t_train
        steps = trainer.step - step0
        metrics = validate(trainer, valid_set, args.batch_size)
    finally:
        _stop(featurizer)
    ready = _read_json(ready_file, {})
    drawn = {n: drawn_before[n] + sampler.drawn[n] for n in names}
    saved = time.perf_counter()
    new_state = trainer.state() | {"descriptors": normalizer.to_dict(), "seed": args.seed}
    parts = save_in_parts(out, STATE, new_state, args.part_bytes)
    call = {
        "call": len(calls) + 1,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        "resumed": state is not None,
        "parameters": trainer.num_parameters,
        "featurize_workers": feat_workers,
        "loader_workers": args.loader_workers,
        "captured": trainer.backend is not None and trainer.stepper.captured,
        "steps": steps,
        "step": trainer.step,
        "learning_rate": round(trainer.schedule(trainer.step), 8),
        "graphs": steps * args.batch_size,
        "graphs_per_second": round(steps * args.batch_size / max(train_seconds, 1e-9), 1),
        "train_loss": round(losses / max(steps_read, 1), 5),
        "valid": metrics,
        "shards_ready": sum(n != VALID for n in ready),
        "molecules_ready": sum(e["molecules"] for n, e in ready.items() if n != VALID),
        "shards_reused": sum(bool(e.get("reused")) for e in ready.values()),
        "featurised_per_second": _featurise_rate(ready),
        "passes_started": sampler.passes,
        "seconds": {
            "model": round(t_model, 1),
            "first_data": round(t_first, 1),
            "train": round(train_seconds, 1),
            "waiting_for_batches": round(wait, 1),
            "save": round(time.perf_counter() - saved, 1),
            "total": round(time.perf_counter() - started, 1),
        },
        "state_bytes": parts["bytes"],
        "state_parts": len(parts["parts"]),
    }
    progress = {
        "calls": calls + [call],
        "step": trainer.step,
        "graphs": sum(c["graphs"] for c in calls) + call["graphs"],
        "drawn": drawn,
        "molecules": manifest["molecules"],
        "descriptors": len(normalizer.names),
    }
    write_atomic(out / PROGRESS, json.dumps(progress, indent=1))
    return call


def _stop(process: subprocess.Popen) -> None:
    """End ``process`` and the pool it started (its process group)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait)
            if sig == signal.SIGTERM:  # its pool's workers, orphaned when it ended
                os.killpg(process.pid, signal.SIGKILL)
            break
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            break


def _featurise_rate(ready: dict[str, Any]) -> float:
    """Molecules per second over the stores built in this call (not those reused)."""
    built = [e for e in ready.values() if not e.get("reused")]
    seconds = sum(e["seconds"] for e in built)
    molecules = sum(e["molecules"] for e in built)
    return round(molecules / seconds, 1) if seconds else 0.0


# -- export: state -> a checkpoint of the library ------------------------------------------


def export(state_dir: Path, out: Path, data: Path | None = None) -> dict[str, Any]:
    """Write the state in ``state_dir`` as a pretraining checkpoint (``train --init-from``,
    ``scripts/ship_pretrained.py``); returns what it wrote."""
    from dataclasses import replace

    from graphormer_urpe.graph.model_config import GraphormerConfig
    from graphormer_urpe.io.checkpoint import save_checkpoint
    from graphormer_urpe.io.parts import load_from_parts
    from graphormer_urpe.runtime.train_config import make_config

    state = load_from_parts(state_dir, STATE)
    progress = _read_json(state_dir / PROGRESS, {})
    model = GraphormerConfig.from_dict(state["model_config"])
    config = replace(make_config("small"), model=model, loss="smooth_l1", dataset="pretrain:v2")
    last = (progress.get("calls") or [{}])[-1]
    record = {
        "task": "rdkit2d-descriptors",
        "source": "pretrain_v2 shards" + (f" ({data})" if data else ""),
        "molecules": progress.get("molecules"),
        "graphs_trained": progress.get("graphs"),
        "calls": len(progress.get("calls", [])),
        "descriptors": state["descriptors"],
    }
    ckpt = {
        "config": config.to_json(),
        "model": state["model"],
        "featurizer": "ogb",
        "target_names": list(state["descriptors"]["names"]),
        "metric": "mae",
        "task_type": "regression",
        "pretrain": record,
        "epoch": 0,
        "step": state["step"],
        "best_metric": (last.get("valid") or {}).get("mae"),
    }
    save_checkpoint(out, ckpt)
    return {"file": str(out), "bytes": out.stat().st_size, "step": state["step"]}


# -- command line ------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("pack", help="SMILES files -> xz shards and manifest.json")
    a.add_argument("--source", type=Path, action="append", required=True)
    a.add_argument("--out", type=Path, required=True)
    a.add_argument("--shards", type=int, default=64)
    a.add_argument("--valid", type=int, default=5000, help="molecules of the validation shard")
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--limit", type=int, default=None, help="only this many molecules (a slice)")
    f = sub.add_parser("featurize", help="(started by run) shards -> stores")
    f.add_argument("--data", type=Path, required=True)
    f.add_argument("--work", type=Path, required=True)
    f.add_argument("--workers", type=int, required=True)
    f.add_argument("--order", nargs="+", required=True)
    r = sub.add_parser("run", help="one call: featurise, train, validate, save the state")
    r.add_argument("--data", required=True, help="the folder pack wrote")
    r.add_argument("--state", default=None, help="the state of the call before (none: start)")
    r.add_argument("--out", required=True, help="where this call's state and progress go")
    r.add_argument("--work", default="/tmp/pretrain_v2", help="stores (kept on a warm machine)")
    r.add_argument("--time-limit", type=float, required=True, help="seconds for the whole call")
    r.add_argument("--reserve", type=float, default=30.0, help="seconds kept for the end")
    r.add_argument("--max-steps", type=int, default=None, help="stop after this many steps")
    r.add_argument("--device", default="auto")
    r.add_argument("--precision", default="auto")
    r.add_argument("--no-capture", action="store_true", help="eager steps on a GPU")
    r.add_argument("--batch-size", type=int, default=256)
    r.add_argument("--lr", type=float, default=2e-4)
    r.add_argument("--warmup", type=int, default=2000)
    r.add_argument("--total-steps", type=int, default=40_000, help="end of the lr decay")
    r.add_argument("--replan", action="store_true", help="move a resumed run's decay end")
    r.add_argument("--layers", type=int, default=MODEL["num_layers"])
    r.add_argument("--width", type=int, default=MODEL["hidden_dim"])
    r.add_argument("--heads", type=int, default=MODEL["num_heads"])
    r.add_argument("--featurize-workers", type=int, default=None, help="default: cores - 5")
    r.add_argument("--loader-workers", type=int, default=4)
    r.add_argument("--part-bytes", type=int, default=15 * 2**20)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--threads", type=int, default=None, help="torch threads of this process")
    e = sub.add_parser("export", help="state -> a checkpoint for --init-from")
    e.add_argument("--state", type=Path, required=True)
    e.add_argument("--out", type=Path, required=True)
    return p


def main(argv: list[str] | None = None) -> dict[str, Any] | None:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if args.command == "pack":
        report = pack(args.source, args.out, args.shards, args.valid, args.seed, args.limit)
    elif args.command == "featurize":
        featurize(args.data, args.work, args.order, args.workers)
        return None
    elif args.command == "run":
        report = {"run": run(args)}
    else:
        report = export(args.state, args.out)
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()

"""The ``synthetic`` and ``lm`` sub-commands.

``graphormer-urpe synthetic --task pi --pe urpe`` trains the CPU-sized model on Position
Identification / Even Token Prediction (a few minutes on two cores) and prints the metrics
as JSON; ``--preset paper`` selects the paper's set-up. Every flag maps to one field of
:class:`~graphormer_urpe.sequence.train.SyntheticConfig` or its
:class:`~graphormer_urpe.sequence.model.SequenceModelConfig`; flags left unset keep the
preset's value.

``graphormer-urpe lm --corpus pydoc --pe urpe`` trains a small Transformer-XL language model
(:mod:`graphormer_urpe.sequence.lm`) the same way, with checkpoints and ``--resume``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

# plain names: the parsers import no torch
from ..sequence.choices import CORPORA, LM_PE_SCHEMES, PE_SCHEMES
from .flags import flag_values

__all__ = [
    "add_synthetic_parser",
    "run_synthetic",
    "add_lm_parser",
    "run_lm",
    "DEFAULT_OUT_ROOT",
    "DEFAULT_LM_OUT_ROOT",
]

#: Output runs land in ``runs/synthetic/<task>_<pe>_v<vocab>`` unless ``--out`` is given.
DEFAULT_OUT_ROOT = Path("runs") / "synthetic"
#: ``lm`` runs land in ``runs/lm/<corpus>_<pe>_s<seed>`` unless ``--out`` is given.
DEFAULT_LM_OUT_ROOT = Path("runs") / "lm"


_SHAPE_FIELDS = ("width", "layers", "heads", "ffn")
"""The model-shape flags of both commands (:func:`_add_shape_flags`)."""
_SYNTHETIC_FIELDS = ("vocab", "max_len", "steps", *_SHAPE_FIELDS, "batch_size", "lr")
_SYNTHETIC_FIELDS += ("warmup_steps", "rel_buckets", "share_scale", "tie_weights")
_SYNTHETIC_FIELDS += ("eval_every", "valid_size", "seed")
"""The ``synthetic`` flags that override a field of the preset's config, by the same name."""
_LM_FIELDS = ("data_root", "steps", "tgt_len", "mem_len", *_SHAPE_FIELDS, "dropout")
_LM_FIELDS += ("attention_dropout", "pre_ln", "share_scale", "batch_size", "lr", "warmup_steps")
_LM_FIELDS += ("schedule", "clip_norm", "eval_every", "eval_batch_size", "max_eval_tokens")
_LM_FIELDS += ("checkpoint_every", "keep_checkpoints", "seed")
"""The ``lm`` flags that override a field of the preset's config, by the same name."""


def add_synthetic_parser(subparsers: Any) -> None:
    """Add the ``synthetic`` sub-command to an :mod:`argparse` sub-parsers object.

    The sub-parser's ``func`` default is :func:`run_synthetic`, so a main program can call
    ``args.func(args)``.
    """
    p: argparse.ArgumentParser = subparsers.add_parser(
        "synthetic",
        help="train on the paper's synthetic sequence tasks (PI / ETP)",
        description=(
            "Train a small transformer on Position Identification (pi) or Even Token "
            "Prediction (etp) with no positional encoding, learned absolute positions (ape), "
            "relative positions (rpe) or Universal RPE (urpe); writes metrics.json, "
            "curve.csv and pe_tables.png to --out and prints the metrics as JSON."
        ),
    )
    p.add_argument(
        "--task", choices=("pi", "etp"), default="pi", help="synthetic task (default: pi)"
    )
    _add_pe_flag(p)
    p.add_argument(
        "--preset",
        choices=("cpu", "paper"),
        default="cpu",
        help=(
            "base configuration: cpu (2x64 model; PI at L=128, ETP at L=16; minutes on two "
            "cores) or paper (3x768 model, L=128, 40k updates of 128 sequences)"
        ),
    )
    p.add_argument("--vocab", type=int, help="task vocabulary V (paper: 1000 or 10000)")
    p.add_argument(
        "--length", type=int, dest="max_len", metavar="L", help="sequence length L (paper: 128)"
    )
    p.add_argument("--steps", type=int, help="number of updates")
    _add_shape_flags(p)
    p.add_argument("--batch-size", type=int, help="sequences per update")
    p.add_argument("--lr", type=float, help="peak learning rate (after warm-up)")
    p.add_argument(
        "--warmup-steps", type=int, help="linear warm-up updates before the linear decay to 0"
    )
    p.add_argument(
        "--rel-buckets",
        type=int,
        help="T5 buckets for the RPE/URPE tables (default: one row per relative offset)",
    )
    _add_scale_flag(p)
    p.add_argument(
        "--tie-weights",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="tie the output projection to the token embedding (default: tied for etp only)",
    )
    p.add_argument("--valid-size", type=int, help="sequences in the fixed validation set")
    _SYNTHETIC.add_common_flags(p, run_synthetic)


def run_synthetic(args: argparse.Namespace) -> int:
    """Run the ``synthetic`` sub-command; returns the process exit status."""
    from ..sequence.train import synthetic_config, train_synthetic

    return _SYNTHETIC.run(args, synthetic_config, train_synthetic)


def add_lm_parser(subparsers: Any) -> None:
    """Add the ``lm`` sub-command to an :mod:`argparse` sub-parsers object (``func`` =
    :func:`run_lm`)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "lm",
        help="train a small Transformer-XL language model (pydoc / WikiText) with URPE",
        description=(
            "Train a causal Transformer-XL language model (segment-level recurrence, memory of "
            "the previous segment) with no positional encoding, learned absolute positions "
            "(ape), a learned relative bias (rpe), Universal RPE (urpe), Transformer-XL's own "
            "relative attention (xl) or xl with URPE's scale (xl-urpe) on Python's "
            "documentation text (pydoc, characters, embedded) or WikiText-2/103 (words); "
            "writes metrics.json (bits per character or perplexity), curve.csv, checkpoints "
            "and pe_tables.png to --out and prints the metrics as JSON."
        ),
    )
    p.add_argument(
        "--corpus",
        choices=CORPORA,
        default="pydoc",
        help="corpus (default: pydoc, embedded; wikitext-* are read from --data-root)",
    )
    p.add_argument(
        "--pe",
        choices=LM_PE_SCHEMES,
        help=(
            "positional scheme: none, ape, rpe (a learned scalar bias per head and distance), "
            "urpe (rpe with URPE's C), xl (Transformer-XL's relative attention: sinusoidal "
            "content-position terms with u, v), xl-urpe (xl with URPE's C; default: the "
            "preset's, urpe for cpu and xl for paper)"
        ),
    )
    p.add_argument(
        "--preset",
        choices=("cpu", "cpu-small", "paper"),
        default="cpu",
        help=(
            "base configuration: cpu (3x128 model, segments of 64 + memory 64, 1,000 updates, "
            "urpe; minutes on one CPU thread), cpu-small (2x64, 10,000 updates) or paper "
            "(Transformer-XL base for WikiText-103: "
            "16x410, 10 heads, tgt_len = mem_len = 150, xl relative attention, adaptive "
            "softmax, 200k updates of 60; GPUs)"
        ),
    )
    p.add_argument(
        "--data-root", help="folder holding wikitext-2/ or wikitext-103/ (default: data)"
    )
    p.add_argument("--steps", type=int, help="number of updates")
    p.add_argument("--tgt-len", type=int, help="tokens per training segment")
    p.add_argument("--mem-len", type=int, help="memory states kept per layer (0: no memory)")
    _add_shape_flags(p)
    p.add_argument("--dropout", type=float, help="embedding / residual / output dropout")
    p.add_argument("--attention-dropout", type=float, help="attention-probability dropout")
    p.add_argument(
        "--pre-ln",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="pre-LN layers instead of Transformer-XL's post-LN (default: post-LN)",
    )
    _add_scale_flag(p)
    p.add_argument("--batch-size", type=int, help="parallel training columns per update")
    p.add_argument("--lr", type=float, help="peak learning rate")
    p.add_argument("--warmup-steps", type=int, help="linear warm-up updates")
    p.add_argument(
        "--schedule", choices=("cosine", "linear"), help="decay after warm-up (default: cosine)"
    )
    p.add_argument("--clip-norm", type=float, help="gradient-norm clipping (default: 0.25)")
    p.add_argument("--eval-batch-size", type=int, help="parallel columns when evaluating")
    p.add_argument(
        "--max-eval-tokens",
        type=int,
        help="score only this many validation tokens during training (final scores: all)",
    )
    p.add_argument("--checkpoint-every", type=int, help="resumable checkpoint every N updates")
    p.add_argument("--keep-checkpoints", type=int, help="step checkpoints to keep")
    _LM.add_common_flags(p, run_lm)


def run_lm(args: argparse.Namespace) -> int:
    """Run the ``lm`` sub-command; returns the process exit status."""
    from ..io.checkpoint import CheckpointError
    from ..sequence.corpus import CorpusUnavailableError
    from ..sequence.lm import lm_config, train_lm

    train = partial(train_lm, resume=args.resume)
    return _LM.run(args, lm_config, train, (CorpusUnavailableError, CheckpointError, ValueError))


@dataclass(frozen=True)
class _SequenceCommand:
    """What differs between the ``synthetic`` and ``lm`` commands, and the run flags and the
    run they share."""

    name: str
    data: str
    """The flag naming the data: ``task`` or ``corpus``."""
    fields: tuple[str, ...]
    """The flags that override a field of the preset's config, by the same name."""
    default_out: Callable[[Any], Path]
    """The run folder of a config when ``--out`` is not given."""
    out_help: str
    seed_help: str
    resumable: bool = False
    """Whether the command takes ``--resume`` (its runs write checkpoints)."""

    def add_common_flags(self, p: argparse.ArgumentParser, func: Callable[..., int]) -> None:
        """The flags of both commands: ``--eval-every``, ``--seed``, and where and how the run
        executes: ``--out`` (and ``--resume``), the device, threads and progress bar; ``func``
        runs the command."""
        p.add_argument("--eval-every", type=int, help="evaluate on the validation set every N")
        p.add_argument("--seed", type=int, help=self.seed_help)
        p.add_argument("--out", type=Path, help=self.out_help)
        if self.resumable:
            p.add_argument(
                "--resume",
                action="store_true",
                help="continue from the newest checkpoint in --out (its configuration is used)",
            )
        p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
        p.add_argument(
            "--threads", type=int, help="torch intra-op threads (default: leave torch's setting)"
        )
        p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
        p.set_defaults(func=func)

    def run(
        self,
        args: argparse.Namespace,
        configure: Callable[..., Any],
        train: Callable[..., dict[str, Any]],
        errors: tuple[type[Exception], ...] = (),
    ) -> int:
        """The run: its config (``configure(preset, data, pe, **overrides)``, a
        ``ValueError`` is a usage error), the threads, the run folder, ``train(config, out,
        device=, progress=)`` (the ``errors`` it may raise are reported, not raised) and the
        metrics printed; the exit status (2 after an error)."""
        _log_setup()
        data = getattr(args, self.data)
        try:
            config = configure(args.preset, data, args.pe, **flag_values(args, self.fields))
        except ValueError as exc:
            return _error(self.name, exc)
        _set_threads(args.threads)
        out = args.out if args.out is not None else self.default_out(config)
        try:
            metrics = train(config, out, device=args.device, progress=not args.no_progress)
        except errors as exc:
            return _error(self.name, exc)
        _print_summary(metrics, out)
        return 0


_SYNTHETIC = _SequenceCommand(
    "synthetic",
    "task",
    _SYNTHETIC_FIELDS,
    lambda c: DEFAULT_OUT_ROOT / f"{c.task}_{c.model.pe}_v{c.model.vocab}",
    out_help=f"output folder (default: {DEFAULT_OUT_ROOT}/<task>_<pe>_v<vocab>)",
    seed_help="seed of the initialisation and training data",
)
_LM = _SequenceCommand(
    "lm",
    "corpus",
    _LM_FIELDS,
    lambda c: DEFAULT_LM_OUT_ROOT / f"{c.corpus}_{c.model.pe}_s{c.seed}",
    out_help=f"run folder (default: {DEFAULT_LM_OUT_ROOT}/<corpus>_<pe>_s<seed>)",
    seed_help="seed of the initialisation and dropout",
    resumable=True,
)


def _error(command: str, exc: Exception) -> int:
    """Report a failed run of ``graphormer-urpe COMMAND`` on standard error; exit status 2."""
    print(f"graphormer-urpe {command}: error: {exc}", file=sys.stderr)
    return 2


def _add_pe_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--pe", choices=PE_SCHEMES, default="urpe", help="positional scheme (default: urpe)"
    )


def _add_shape_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--width", type=int, help="model width d")
    p.add_argument("--layers", type=int, help="number of layers")
    p.add_argument("--heads", type=int, help="attention heads")
    p.add_argument("--ffn", type=int, help="feed-forward hidden width")


def _add_scale_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--per-layer-scale",
        action="store_const",
        const=False,
        dest="share_scale",
        help="give every layer its own URPE matrix C (default: one C shared by all layers)",
    )


def _log_setup() -> None:
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")


def _set_threads(threads: int | None) -> None:
    import torch

    if threads is not None:
        torch.set_num_threads(threads)


def _print_summary(metrics: dict[str, Any], out: Path) -> None:
    """Print a run's metrics (without the per-evaluation list and the config) as JSON."""
    summary = {k: v for k, v in metrics.items() if k not in ("evals", "config")}
    summary["out"] = str(out)
    print(json.dumps(summary, indent=2))

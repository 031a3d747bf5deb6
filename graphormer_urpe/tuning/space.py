"""The search space of a tuning run: what each trial samples, and how a sample becomes a
training run's fields.

The space is define-by-run (Optuna samples one parameter at a time), so conditional parts
stay honest: with ``init_from == "pretrained"`` the architecture is the pretrained
checkpoint's, and the layers and width are not sampled at all (a TPE sampler then models
them only on the trials that used them). ``mol_features`` is sampled for ``csv:`` sets
only, the loss for regressions only, ``init_from`` only where the pretrained model's atom
features are the set's. A choice left with one value (``tune --mol-features``,
``--init-from``, ``--loss``) is fixed: every trial uses it and nothing is sampled for it.

The first trial of a new study is the recommended recipe (:func:`baseline`): a search then
never ranks first a recipe that does worse on validation than what ``train`` does by
default, in the same time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..runtime.train_config import resolve_mol_features

if TYPE_CHECKING:
    import optuna

    from ..runtime.train_config import TrainConfig
    from .problem import Problem

__all__ = ["SearchSpace", "baseline", "check_space", "suggest"]

BASELINE_WARMUP_FRACTION = 0.1
"""The warm-up of the ``small`` preset in a run planned to fill its time: a tenth of its
steps (up to its 500; :func:`~graphormer_urpe.runtime.train_config.plan_steps`)."""


@dataclass(frozen=True)
class SearchSpace:
    """The ranges a trial samples from: ``(low, high)`` for numbers (``lr`` and
    ``weight_decay`` on a log scale), tuples of choices for the rest."""

    lr: tuple[float, float] = (1e-4, 3e-3)
    weight_decay: tuple[float, float] = (1e-5, 0.1)
    dropout: tuple[float, float] = (0.0, 0.3)
    attention_dropout: tuple[float, float] = (0.0, 0.3)
    warmup_fraction: tuple[float, float] = (0.0, 0.2)
    """The warm-up as a fraction of the trial's planned steps."""
    num_layers: tuple[int, int] = (2, 8)
    hidden_dim: tuple[int, ...] = (32, 64, 128, 256)
    """Model widths; the feed-forward width follows it, the heads stay the preset's (8)."""
    batch_size: tuple[int, ...] = (16, 32, 64, 128)
    mol_features: tuple[str, ...] = ("none", "rdkit2d", "rdkit2d+morgan")
    """``--mol-features`` kinds (``morgan`` alone is left to ``tune --mol-features morgan``)."""
    init_from: tuple[str, ...] = ("none", "pretrained")
    loss: tuple[str, ...] = ("mse", "smooth_l1")
    """Regression losses: squared error or Huber (``smooth_l1``, threshold 1, on the
    standardised targets)."""


def suggest(
    trial: optuna.Trial, space: SearchSpace, problem: Problem
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Sample one trial's hyper-parameters.

    Returns:
        ``(train_fields, model_fields)``: fields of
        :class:`~graphormer_urpe.runtime.train_config.TrainConfig` and of
        :class:`~graphormer_urpe.graph.model_config.GraphormerConfig` to override.
    """
    train: dict[str, Any] = {
        "lr": trial.suggest_float("lr", *space.lr, log=True),
        "weight_decay": trial.suggest_float("weight_decay", *space.weight_decay, log=True),
        "warmup_fraction": trial.suggest_float("warmup_fraction", *space.warmup_fraction),
        "batch_size": trial.suggest_categorical("batch_size", list(space.batch_size)),
    }
    model: dict[str, Any] = {
        "dropout": trial.suggest_float("dropout", *space.dropout),
        "attention_dropout": trial.suggest_float("attention_dropout", *space.attention_dropout),
    }
    if problem.is_csv and len(space.mol_features) > 1:
        train["mol_features"] = trial.suggest_categorical("mol_features", list(space.mol_features))
    if problem.task_type == "regression":
        train["loss"] = _choose(trial, "loss", space.loss)
    # a pretrained start fixed on a set it does not fit is refused before (check_space)
    init = _choose(trial, "init_from", space.init_from) if problem.pretrained_fits else "none"
    if init != "none":
        train["init_from"] = init  # the checkpoint's architecture: nothing more to sample
    else:
        hidden = trial.suggest_categorical("hidden_dim", list(space.hidden_dim))
        model.update(
            num_layers=trial.suggest_int("num_layers", *space.num_layers),
            hidden_dim=hidden,
            ffn_dim=hidden,
        )
    return train, model


def baseline(space: SearchSpace, problem: Problem, base: TrainConfig) -> dict[str, Any]:
    """The parameters of the recommended recipe, as :func:`suggest` would name them:
    ``train --init-from pretrained`` where the set takes the pretrained start (``train``
    from scratch otherwise), with ``base``'s learning rate, weight decay, batch size,
    dropouts, loss and ``--mol-features auto``, and a warm-up of a tenth of the steps.

    Only parameters the space samples and holds are returned: a value outside a range or
    the choices (a space narrowed by hand, ``--mol-features`` fixed) is left to the sampler.
    """
    fits = problem.pretrained_fits and "pretrained" in space.init_from
    init = space.init_from[0] if len(space.init_from) == 1 else "pretrained" if fits else "none"
    wanted: dict[str, Any] = {
        "lr": base.lr,
        "weight_decay": base.weight_decay,
        "warmup_fraction": BASELINE_WARMUP_FRACTION,
        "batch_size": base.batch_size,
        "dropout": base.model.dropout,
        "attention_dropout": base.model.attention_dropout,
    }
    if problem.is_csv:
        wanted["mol_features"] = resolve_mol_features(replace(base, init_from=init)).mol_features
    if problem.task_type == "regression":
        wanted["loss"] = base.loss or ("mse" if problem.is_csv else "l1")
    if problem.pretrained_fits:
        wanted["init_from"] = init
    if init == "none":
        wanted.update(num_layers=base.model.num_layers, hidden_dim=base.model.hidden_dim)
    return {k: v for k, v in wanted.items() if _holds(space, k, v)}


_RANGES = ("lr", "weight_decay", "dropout", "attention_dropout", "warmup_fraction", "num_layers")
"""The fields of :class:`SearchSpace` that are ``(low, high)`` ranges; the rest are choices."""


def _holds(space: SearchSpace, name: str, value: Any) -> bool:
    """``value`` is one the space samples for ``name``: within its range, or one of its
    choices when it has several (a single choice is fixed, not sampled)."""
    allowed = getattr(space, name)
    if name in _RANGES:
        return allowed[0] <= value <= allowed[1]
    return len(allowed) > 1 and value in allowed


def _choose(trial: optuna.Trial, name: str, choices: tuple[str, ...]) -> str:
    """One of ``choices``: sampled, or the only one (fixed, nothing sampled)."""
    if len(choices) == 1:
        return choices[0]
    return trial.suggest_categorical(name, list(choices))


def check_space(space: SearchSpace, problem: Problem) -> None:
    """Refuse fixed choices the problem cannot take.

    Raises:
        ValueError: ``init_from`` fixed to ``pretrained`` on a set whose atom features are not
            the pretrained model's, or a regression loss fixed for a binary task.
    """
    if space.init_from == ("pretrained",) and not problem.pretrained_fits:
        raise ValueError(
            "--init-from pretrained needs the pretrained model's atom features (--featurizer "
            "ogb); this set uses others"
        )
    if len(space.loss) == 1 and problem.task_type != "regression":
        raise ValueError("--loss applies to regression targets; binary tasks train on BCE")

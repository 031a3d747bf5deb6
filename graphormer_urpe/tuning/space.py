"""The search space of a tuning run: what each trial samples, and how a sample becomes a
training run's fields.

The space is define-by-run (Optuna samples one parameter at a time), so conditional parts
stay honest: with ``init_from == "pretrained"`` the architecture is the pretrained
checkpoint's, and the layers and width are not sampled at all (a TPE sampler then models
them only on the trials that used them). ``mol_features`` is sampled for ``csv:`` sets
only, the loss for regressions only, ``init_from`` only where the pretrained model's atom
features are the set's. A choice left with one value (``tune --mol-features``,
``--init-from``, ``--loss``) is fixed: every trial uses it and nothing is sampled for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna

    from .problem import Problem

__all__ = ["SearchSpace", "check_space", "suggest"]


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
        :class:`~graphormer_urpe.runtime.config.TrainConfig` and of
        :class:`~graphormer_urpe.graph.config.GraphormerConfig` to override.
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

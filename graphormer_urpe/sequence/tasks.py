r"""The paper's synthetic sequence tasks: Position Identification and Even Token Prediction.

Both tasks (Luo et al., NeurIPS 2022, §4.1 / Figure 1) feed a sequence of ``L`` i.i.d. uniform
tokens and ask for a per-position prediction that needs *absolute* position information:

* **Position Identification (PI)**: :math:`y_i = i + 1` for :math:`0 \le i < L`. The target of
  position 0 equals the padding index 1, so position 0 is neither trained nor scored
  (``L - 1`` scored positions per sequence).
* **Even Token Prediction (ETP)**: :math:`y_i = x_{2i+1}` for :math:`i < L/2` (the 2nd, 4th,
  ... tokens, packed into the first half) and :math:`y_i = V - 2` for :math:`i \ge L/2`, a
  filler id that never occurs in the inputs. All ``L`` positions are scored.

Dictionary layout as in the reference (fairseq) code: the dictionary has ``V + 11`` entries,
the padding index is ``1``, and input tokens are drawn uniformly from
``[11, 11 + V - 20)`` (e.g. 11..990 for ``V = 1000``). Training data are sampled online from
a seeded :class:`torch.Generator`; the validation set is a fixed sample, deterministic in its
seed (the reference re-samples validation data at every evaluation; a fixed set is a
deliberate, documented deviation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

__all__ = [
    "PAD_INDEX",
    "NUM_SPECIAL_TOKENS",
    "FIRST_INPUT_TOKEN",
    "TaskName",
    "SyntheticBatch",
    "SyntheticTask",
]

TaskName = Literal["pi", "etp"]

#: Padding index of the dictionary; targets equal to it are not scored.
PAD_INDEX = 1
#: The dictionary holds ``V + NUM_SPECIAL_TOKENS`` entries.
NUM_SPECIAL_TOKENS = 11
#: Smallest input token id.
FIRST_INPUT_TOKEN = 11


@dataclass(frozen=True)
class SyntheticBatch:
    """A batch of a synthetic task.

    Attributes:
        tokens: ``[B, L]`` long input ids.
        targets: ``[B, L]`` long target ids (``PAD_INDEX`` where not scored).
        mask: ``[B, L]`` bool, ``True`` on scored positions.
    """

    tokens: Tensor
    targets: Tensor
    mask: Tensor

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def to(self, device: torch.device | str) -> SyntheticBatch:
        """Move every tensor to ``device``."""
        return SyntheticBatch(self.tokens.to(device), self.targets.to(device), self.mask.to(device))

    def slice(self, start: int, stop: int) -> SyntheticBatch:
        """Rows ``start:stop`` of the batch."""
        return SyntheticBatch(
            self.tokens[start:stop], self.targets[start:stop], self.mask[start:stop]
        )


@dataclass(frozen=True)
class SyntheticTask:
    """Generator of Position Identification (``"pi"``) or Even Token Prediction (``"etp"``) data.

    Args:
        name: ``"pi"`` or ``"etp"``.
        vocab: the task vocabulary ``V`` (1,000 or 10,000 in the paper); the dictionary has
            ``V + 11`` entries.
        length: sequence length ``L`` (128 in the paper); must be even for ETP.

    Example:
        >>> task = SyntheticTask("pi", vocab=1000, length=128)
        >>> batch = task.sample(32, torch.Generator().manual_seed(1))
        >>> batch.tokens.shape, int(batch.mask.sum())
        (torch.Size([32, 128]), 4064)
    """

    name: TaskName
    vocab: int = 1000
    length: int = 128

    def __post_init__(self) -> None:
        if self.name not in ("pi", "etp"):
            raise ValueError(f"unknown synthetic task {self.name!r}; expected 'pi' or 'etp'")
        if self.vocab <= 20:
            raise ValueError(
                f"vocab must be > 20 (input ids are drawn from [11, 11 + vocab - 20)), "
                f"got {self.vocab}"
            )
        if self.length < 2:
            raise ValueError(f"length must be >= 2, got {self.length}")
        if self.name == "etp" and self.length % 2 != 0:
            raise ValueError(f"ETP needs an even length, got {self.length}")
        if self.name == "pi" and self.length >= self.dictionary_size:
            raise ValueError(
                f"PI targets 1..{self.length} must fit in the dictionary of "
                f"{self.dictionary_size} entries (vocab={self.vocab})"
            )

    @property
    def dictionary_size(self) -> int:
        """Output vocabulary size ``V + 11``."""
        return self.vocab + NUM_SPECIAL_TOKENS

    @property
    def token_range(self) -> tuple[int, int]:
        """Half-open range ``[low, high)`` of input token ids."""
        return FIRST_INPUT_TOKEN, FIRST_INPUT_TOKEN + self.vocab - 20

    @property
    def filler(self) -> int:
        """ETP target of the second half, ``V - 2`` (never an input token)."""
        return self.vocab - 2

    @property
    def num_scored(self) -> int:
        """Scored positions per sequence: ``L - 1`` for PI, ``L`` for ETP."""
        return self.length - 1 if self.name == "pi" else self.length

    @property
    def position_blind_accuracy(self) -> float:
        """Expected accuracy of the best predictor that ignores positions.

        PI: one position out of ``L - 1`` scored ones (``1 / (L - 1)``). ETP: the filler on
        every position, right on the second half (``1 / 2``); a content guess on the first
        half cannot beat it.
        """
        return 1.0 / (self.length - 1) if self.name == "pi" else 0.5

    def targets(self, tokens: Tensor) -> Tensor:
        """Targets for input ids.

        Args:
            tokens: ``[B, L]`` long input ids.

        Returns:
            ``[B, L]`` long targets; for PI position 0 holds ``PAD_INDEX``.
        """
        if tokens.dim() != 2 or tokens.shape[1] != self.length:
            raise ValueError(
                f"expected tokens of shape [B, {self.length}], got {list(tokens.shape)}"
            )
        b, n = tokens.shape
        if self.name == "pi":
            pos = torch.arange(1, n + 1, device=tokens.device, dtype=torch.long)
            return pos.expand(b, n).clone()
        half = n // 2
        out = torch.full_like(tokens, self.filler)
        out[:, :half] = tokens[:, 1::2]
        return out

    @staticmethod
    def scored_mask(targets: Tensor) -> Tensor:
        """``[B, L]`` bool mask of scored positions (target not the padding index)."""
        return targets.ne(PAD_INDEX)

    def sample(self, batch_size: int, generator: torch.Generator) -> SyntheticBatch:
        """Draw ``batch_size`` fresh sequences (online training data).

        Args:
            batch_size: number of sequences ``B``.
            generator: a CPU :class:`torch.Generator`; the draw is a deterministic function
                of its state.

        Returns:
            A :class:`SyntheticBatch` with ``[B, L]`` tensors on the CPU.
        """
        low, high = self.token_range
        tokens = torch.randint(
            low, high, (batch_size, self.length), generator=generator, dtype=torch.long
        )
        targets = self.targets(tokens)
        return SyntheticBatch(tokens, targets, self.scored_mask(targets))

    def validation_set(self, size: int, seed: int) -> SyntheticBatch:
        """A fixed validation sample of ``size`` sequences, deterministic in ``seed``."""
        generator = torch.Generator().manual_seed(seed)
        return self.sample(size, generator)

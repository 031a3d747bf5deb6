"""What one request may ask of a served model, and the checks that refuse the rest with a 4xx.

Every limit has a default that a team's server can keep; ``graphormer-urpe serve`` sets each
with a flag. A request over a limit gets a status and a sentence that names the limit and
its value (:class:`LimitExceeded`), never a 500, and the server goes on serving.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["LimitExceeded", "ServeLimits", "too_many_atoms"]


@dataclass(frozen=True)
class ServeLimits:
    """The bounds of one request.

    Attributes:
        max_molecules: SMILES (or file rows) per ``/predict`` request.
        max_explain: molecules per ``/explain`` request (each costs many forward passes).
        max_upload_bytes: bytes of a request body (an upload, or a JSON list of SMILES).
        max_atoms: heavy atoms of one molecule.
        request_seconds: the longest a request may wait for its predictions.
        permutations: orderings of the atoms per molecule for ``/explain``'s Shapley values.
    """

    max_molecules: int = 1000
    max_explain: int = 10
    max_upload_bytes: int = 10 * 2**20
    max_atoms: int = 200
    request_seconds: float = 30.0
    permutations: int = 16

    def __post_init__(self) -> None:
        for name in ("max_molecules", "max_explain", "max_upload_bytes", "max_atoms"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not self.request_seconds > 0:
            raise ValueError(f"request_seconds must be above 0, got {self.request_seconds}")
        if self.permutations < 2:
            raise ValueError(f"permutations must be at least 2, got {self.permutations}")


class LimitExceeded(Exception):
    """A request over one of the :class:`ServeLimits` (or otherwise refused before any work).

    Attributes:
        status: the HTTP status to answer with (a 4xx).
        detail: what was wrong, in one sentence.
    """

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def too_many_atoms(smiles: Sequence[str], max_atoms: int) -> list[tuple[int, int]]:
    """``(row, heavy atoms)`` of each SMILES of more than ``max_atoms`` heavy atoms.

    A SMILES of at most ``max_atoms`` characters cannot hold more atoms, so only longer ones
    are parsed (without sanitising: a SMILES RDKit cannot read is left to the featuriser,
    which gives the row its reason).
    """
    from rdkit import Chem, RDLogger

    found = []
    long = [(i, s) for i, s in enumerate(smiles) if len(s) > max_atoms]
    if not long:
        return found
    RDLogger.DisableLog("rdApp.*")
    try:
        for i, s in long:
            mol = Chem.MolFromSmiles(s, sanitize=False)
            if mol is None:
                continue
            heavy = sum(a.GetAtomicNum() != 1 for a in mol.GetAtoms())
            if heavy > max_atoms:
                found.append((i, heavy))
    finally:
        RDLogger.EnableLog("rdApp.*")
    return found

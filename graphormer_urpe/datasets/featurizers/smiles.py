"""SMILES → RDKit molecule: parsing and sanitising, and the error every featuriser raises for a
molecule it cannot read (:class:`InvalidMoleculeError`, a ``ValueError`` naming the SMILES)."""

from __future__ import annotations

from rdkit import Chem, rdBase

__all__ = ["InvalidMoleculeError", "MolOrSmiles", "as_mol", "parse_smiles"]


class InvalidMoleculeError(ValueError):
    """A SMILES string (or molecule) that cannot be parsed or featurised.

    Attributes:
        smiles: the offending SMILES (``""`` when unknown).
    """

    def __init__(self, message: str, smiles: str = "") -> None:
        super().__init__(message)
        self.smiles = smiles


MolOrSmiles = str | Chem.Mol


def parse_smiles(smiles: str) -> Chem.Mol:
    """Parse and sanitise a SMILES string.

    Args:
        smiles: the SMILES string.

    Returns:
        The sanitised RDKit molecule (at least one atom).

    Raises:
        InvalidMoleculeError: naming the SMILES when it is not a string, does not parse or
            sanitise, or has no atoms.
    """
    if not isinstance(smiles, str):
        raise InvalidMoleculeError(
            f"expected a SMILES string, got {type(smiles).__name__} {smiles!r}", str(smiles)
        )
    text = smiles.strip()
    if not text:
        raise InvalidMoleculeError(f"empty SMILES {smiles!r}", smiles)
    with rdBase.BlockLogs():  # RDKit would print its own parse error to stderr
        mol = Chem.MolFromSmiles(text)
    if mol is None:
        raise InvalidMoleculeError(f"RDKit cannot parse SMILES {smiles!r}", smiles)
    if mol.GetNumAtoms() == 0:
        raise InvalidMoleculeError(f"SMILES {smiles!r} has no atoms", smiles)
    return mol


def as_mol(mol_or_smiles: MolOrSmiles) -> tuple[Chem.Mol, str]:
    """The sanitised molecule of a SMILES string (:func:`parse_smiles`) or a molecule, and its
    SMILES (canonical for a molecule given).

    Raises:
        InvalidMoleculeError: as :func:`parse_smiles`, or a molecule without atoms.
    """
    if isinstance(mol_or_smiles, Chem.Mol):
        if mol_or_smiles.GetNumAtoms() == 0:
            raise InvalidMoleculeError("molecule has no atoms")
        return mol_or_smiles, Chem.MolToSmiles(mol_or_smiles)
    return parse_smiles(mol_or_smiles), mol_or_smiles

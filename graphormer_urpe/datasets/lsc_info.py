"""The OGB-LSC molecule datasets (PCQM4Mv2, PCQM4M v1): their folders, URLs and official
splits (:class:`LSCInfo`), by name in :data:`LSC_DATASETS`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LSCInfo", "LSC_DATASETS", "LSC_DEFAULT_ROOT", "PCQM4MV2", "PCQM4M", "lsc_dataset"]

LSC_DEFAULT_ROOT = "data"


@dataclass(frozen=True)
class LSCInfo:
    """One OGB-LSC molecule dataset: where its files live and what the official splits are."""

    name: str
    """Name in :func:`~graphormer_urpe.datasets.load_dataset` (``pcqm4mv2``, ``pcqm4m``)."""
    title: str
    folder: str
    """Folder under the root (OGB's name)."""
    url: str
    splits: tuple[str, ...]
    test_splits: tuple[str, ...]
    """Unlabelled splits predicted for a submission."""
    official_sizes: tuple[tuple[str, int], ...]
    evaluator: str
    """Class name in ``ogb.lsc``."""
    download_size: str

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self.official_sizes)

    @property
    def total(self) -> int:
        return sum(self.sizes.values())

    @property
    def dev_test(self) -> str:
        """The split used as ``DatasetSplits.test`` (the first test split)."""
        return self.test_splits[0]

    def submission_file(self, split: str) -> str:
        """File name OGB's ``save_test_submission`` writes for ``split``."""
        if self.name == "pcqm4mv2":
            return f"y_pred_pcqm4m-v2_{split}.npz"
        return "y_pred_pcqm4m.npz"


PCQM4MV2 = LSCInfo(
    name="pcqm4mv2",
    title="PCQM4Mv2",
    folder="pcqm4m-v2",
    url="https://dgl-data.s3-accelerate.amazonaws.com/dataset/OGB-LSC/pcqm4m-v2.zip",
    splits=("train", "valid", "test-dev", "test-challenge"),
    test_splits=("test-dev", "test-challenge"),
    official_sizes=(
        ("train", 3_378_606),
        ("valid", 73_545),
        ("test-dev", 147_037),
        ("test-challenge", 147_432),
    ),
    evaluator="PCQM4Mv2Evaluator",
    download_size="about 60 MB",
)
PCQM4M = LSCInfo(
    name="pcqm4m",
    title="PCQM4M",
    folder="pcqm4m_kddcup2021",
    url="https://dgl-data.s3-accelerate.amazonaws.com/dataset/OGB-LSC/pcqm4m_kddcup2021.zip",
    splits=("train", "valid", "test"),
    test_splits=("test",),
    official_sizes=(("train", 3_045_360), ("valid", 380_670), ("test", 377_423)),
    evaluator="PCQM4MEvaluator",
    download_size="about 60 MB",
)
LSC_DATASETS: dict[str, LSCInfo] = {PCQM4MV2.name: PCQM4MV2, PCQM4M.name: PCQM4M}
"""The OGB-LSC molecule datasets by name."""


def lsc_dataset(name: str) -> LSCInfo:
    """The OGB-LSC dataset called ``name``; a :class:`ValueError` names the choices."""
    try:
        return LSC_DATASETS[name]
    except KeyError:
        raise ValueError(
            f"unknown OGB-LSC dataset {name!r}; choose {sorted(LSC_DATASETS)}"
        ) from None

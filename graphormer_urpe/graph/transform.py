"""Graphormer's structural features as a PyG transform: :class:`GraphormerFeatures`.

The features themselves (shortest paths, path bond features, degrees) are computed by
:mod:`graphormer_urpe.graph.structure`, which needs no ``torch_geometric``; this module holds
the one class that subclasses PyG's ``BaseTransform`` (``graphormer_urpe.graph`` gives it
too, importing it on first use).
"""

from __future__ import annotations

from collections.abc import Iterable

from torch_geometric.data import Data
from torch_geometric.transforms import BaseTransform
from tqdm.auto import tqdm

from .add_features import add_graphormer_features
from .structure import store_graphormer_features

__all__ = ["GraphormerFeatures"]


class GraphormerFeatures(BaseTransform):
    r"""PyG transform storing Graphormer's structural features on each graph.

    Use it as a ``pre_transform`` (computed once and cached with the processed dataset) or as
    a ``transform``. It adds flat tensors that PyG can concatenate and split:

    * ``spatial_pos``: ``[N * N]`` shortest-path hops (row-major ``[N, N]``), 510 unreachable
    * ``edge_input``: ``[N * N * D, F_e]`` path bond features (row-major ``[N, N, D, F_e]``)
    * ``edge_input_hops``: ``[1]`` the graph's ``D`` (``<= multi_hop_max_dist``)
    * ``degree``: ``[N]`` stored out-going edges per node

    Integer tensors are stored as int16 when their values fit. ``data.x`` and
    ``data.edge_attr`` are left untouched (raw, non-negative integer categories).

    Args:
        multi_hop_max_dist: the longest path, in hops, whose bond features are kept (20 for
            ZINC, 5 for PCQM4M in the published set-ups).
    """

    def __init__(self, multi_hop_max_dist: int = 20) -> None:
        if multi_hop_max_dist < 1:
            raise ValueError(f"multi_hop_max_dist must be >= 1, got {multi_hop_max_dist}")
        self.multi_hop_max_dist = multi_hop_max_dist

    def forward(self, data: Data) -> Data:
        return store_graphormer_features(data, self.multi_hop_max_dist)

    def apply_many(self, data_list: Iterable[Data], progress: bool | None = False) -> list[Data]:
        """This transform on a whole list of graphs at once (:func:`add_graphormer_features`).

        Args:
            data_list: the graphs.
            progress: show a progress bar; ``None``: only on a terminal.

        Returns:
            Shallow copies of the graphs carrying exactly what calling the transform on each
            graph would store.
        """
        if type(self).forward is not GraphormerFeatures.forward:  # a subclass's own features
            disable = None if progress is None else not progress
            return [self(data) for data in tqdm(data_list, disable=disable, leave=False)]
        return add_graphormer_features(data_list, self.multi_hop_max_dist, progress=progress)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}(multi_hop_max_dist={self.multi_hop_max_dist})"

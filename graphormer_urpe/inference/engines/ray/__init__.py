"""``predict --engine ray``: a library of SMILES files screened on a Ray cluster with Ray Data
(the ``ray`` extra).

* :mod:`.shards`: the input, a folder or a glob of SMILES files, read in blocks of rows;
* :mod:`.predictor`: a trained model as the callable class Ray Data's ``map_batches`` runs in
  its actors (:class:`~.predictor.Predictor`);
* :mod:`.output`: one part file per input shard, and the manifest that lets a re-run skip
  finished shards;
* :mod:`.engine`: the run (:func:`~.engine.predict_on_ray`) and the cluster it connects to.

Importing this package does not import Ray.
"""

from ....utils.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        ".engine": ["ClusterUnreachable", "connect", "predict_on_ray"],
        ".predictor": ["Predictor"],
        ".shards": ["list_shards", "read_shard"],
        ".output": ["Manifest", "PartWriter"],
    },
)

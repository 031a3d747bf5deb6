"""The ``graphormer-urpe`` command: a thin layer over the library.

Every sub-command parses its flags into the library's config objects and calls library
functions; errors reach the user as one line (``graphormer-urpe: error: ...``) and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence

__all__ = ["main", "build_parser"]

log = logging.getLogger("graphormer_urpe")


def _nci_smiles(limit: int) -> list[str]:
    from rdkit import RDConfig

    path = os.path.join(RDConfig.RDDataDir, "NCI", "first_5k.tpsa.csv")
    out = []
    with open(path) as fh:
        for line in fh:
            if line.startswith("#") or not line.strip():
                continue
            out.append(line.split(",")[0])
            if len(out) == limit:
                break
    return out


def run_demo(args: argparse.Namespace) -> int:
    """Forward and backward pass of a URPE-Graphormer on real molecules (RDKit's NCI set)."""
    import torch
    from ogb.utils import smiles2graph
    from torch_geometric.data import Batch, Data

    from .graph import Graphormer, GraphormerFeatures

    torch.manual_seed(args.seed)
    features = GraphormerFeatures(multi_hop_max_dist=5)
    graphs = []
    for smi in _nci_smiles(args.molecules):
        g = smiles2graph(smi)
        graphs.append(
            features(
                Data(
                    x=torch.from_numpy(g["node_feat"]),
                    edge_index=torch.from_numpy(g["edge_index"]),
                    edge_attr=torch.from_numpy(g["edge_feat"]),
                    num_nodes=g["num_nodes"],
                )
            )
        )
    batch = Batch.from_data_list(graphs)
    model = Graphormer.from_preset(args.preset, attention=args.attention, num_layers=args.layers)
    start = time.perf_counter()
    pred = model(batch)
    pred.square().mean().backward()
    seconds = time.perf_counter() - start
    report = {
        "molecules": len(graphs),
        "atoms": int(batch.num_nodes),
        "preset": args.preset,
        "attention": args.attention,
        "layers": args.layers,
        "parameters": sum(p.numel() for p in model.parameters()),
        "prediction_shape": list(pred.shape),
        "forward_backward_seconds": round(seconds, 3),
    }
    print(json.dumps(report, indent=2))
    return 0


def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="forward + backward pass on real molecules (no download needed)",
        description="Run a URPE-Graphormer forward and backward pass on molecules from the NCI "
        "set that ships with RDKit, and print a JSON summary.",
    )
    p.add_argument("--molecules", type=int, default=64, help="number of molecules (default 64)")
    p.add_argument("--preset", default="pcqm4mv2-base", help="model preset (default pcqm4mv2-base)")
    p.add_argument(
        "--attention", choices=["graphormer", "urpe"], default="urpe", help="attention kind"
    )
    p.add_argument("--layers", type=int, default=2, help="number of layers (default 2)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.set_defaults(func=run_demo)


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser (one sub-parser per command)."""
    parser = argparse.ArgumentParser(
        prog="graphormer-urpe",
        description="Graphormer and Universal RPE attention for molecular property prediction.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in _COMMANDS:
        add(sub)
    return parser


_COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_add_demo]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``graphormer-urpe`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
    )
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("graphormer-urpe: interrupted", file=sys.stderr)
        return 130
    except (ValueError, KeyError, FileNotFoundError, RuntimeError, OSError) as exc:
        if args.verbose:
            raise
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"graphormer-urpe: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

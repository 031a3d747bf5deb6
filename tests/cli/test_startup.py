"""Start-up: the command line and the package import only what they use, when they use it.

Which modules a piece of code imports is checked in a fresh interpreter (this test process has
imported everything already): argument parsing and ``--help`` import no torch; the model's
forward pass and ``predict`` import neither ``torch._dynamo`` nor ``torch_geometric``, and
``predict`` without ``--engine ray`` leaves Ray unimported. The lazy packages (PEP 562) give
every public name, the same object as its module's.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest
import torch

import graphormer_urpe
from graphormer_urpe.utils.compiler import compiler_disable
from tests.helpers import VALID, tiny_checkpoint

REPO = Path(__file__).resolve().parents[2]
PACKAGES = [
    "graphormer_urpe",
    "graphormer_urpe.graph",
    "graphormer_urpe.training",
    "graphormer_urpe.inference",
    "graphormer_urpe.inference.engines",
    "graphormer_urpe.inference.engines.ray",
    "graphormer_urpe.inference.explain",
    "graphormer_urpe.inference.intervals",
    "graphormer_urpe.runtime",
    "graphormer_urpe.datasets",
    "graphormer_urpe.sequence",
]
COMPILER_AND_PYG = ["torch._dynamo", "torch_geometric", "triton"]


def _env() -> dict[str, str]:
    """This process's environment with this checkout first on the path."""
    path = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def _child(code: str, *args: str) -> dict:
    """Run ``code`` in a fresh interpreter (this checkout first on the path); it prints one
    JSON object last, which is returned."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_parsing_and_every_help_import_no_torch():
    out = _child(
        """
        import contextlib, io, json, sys, time

        before = time.perf_counter()
        import graphormer_urpe.cli as cli
        after = time.perf_counter()
        parser = cli.build_parser()
        sub = next(a for a in parser._actions if a.dest == "command")
        helps = {}
        for argv in [["--help"]] + [[name, "--help"] for name in sub.choices]:
            text = io.StringIO()
            with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit):
                parser.parse_args(argv)
            helps[" ".join(argv)] = len(text.getvalue())
        args = parser.parse_args(["predict", "--checkpoint", "x.pt", "--smiles", "CCO"])
        heavy = ["torch", "torch_geometric", "rdkit", "numpy", "pandas", "ray"]
        print(json.dumps({
            "commands": sorted(sub.choices),
            "helps": helps,
            "workers": args.workers,
            "clock": before <= cli.IMPORTED_AT <= after,
            "imported": [m for m in heavy if m in sys.modules],
        }))
        """
    )
    assert out["imported"] == []
    assert {"train", "predict", "evaluate", "synthetic", "lm", "convert"} <= set(out["commands"])
    assert len(out["helps"]) == len(out["commands"]) + 1 and min(out["helps"].values()) > 200
    assert out["workers"] == 2  # the defaults of predict, read without importing the stream
    assert out["clock"]  # --time-limit counts from the package's import: the command's start


def test_model_forward_imports_neither_the_compiler_nor_pyg():
    out = _child(
        """
        import json, sys

        import numpy as np
        import torch

        from graphormer_urpe.datasets.store import featurize_chunk, flat_graphs, with_pointers
        from graphormer_urpe.graph import Graphormer, collate, get_preset
        from graphormer_urpe.graph.model import fit_tables

        smiles = ["CCO", "c1ccccc1O", "CC(=O)N"]
        arrays, failures, _ = featurize_chunk(smiles, np.zeros((3, 1)))
        flat, _ = flat_graphs(with_pointers(arrays), range(3), 5)
        torch.manual_seed(0)
        config = fit_tables(get_preset("small", attention="urpe", num_layers=2), "ogb")
        model = Graphormer(config).eval()
        with torch.no_grad():
            pred = model(collate(flat, config.multi_hop_max_dist))
        heavy = ["torch._dynamo", "torch_geometric", "triton", "pandas", "ogb"]
        print(json.dumps({
            "shape": list(pred.shape),
            "finite": bool(torch.isfinite(pred).all()),
            "imported": [m for m in heavy if m in sys.modules],
        }))
        """
    )
    assert out["shape"] == [3, 1] and out["finite"]
    assert not set(COMPILER_AND_PYG) & set(out["imported"]), out["imported"]


def test_predict_command_imports_neither_the_compiler_nor_pyg_nor_pandas(tmp_path):

    ckpt = tiny_checkpoint(tmp_path / "best.pt", "ogb")
    out = _child(
        """
        import contextlib, io, json, sys

        from graphormer_urpe import cli

        text = io.StringIO()
        with contextlib.redirect_stdout(text), contextlib.redirect_stderr(io.StringIO()):
            code = cli.main(["predict", "--checkpoint", sys.argv[1], "--smiles", "CCO", "C1CC"])
        heavy = ["torch", "torch._dynamo", "torch_geometric", "triton", "pandas", "scipy", "ray"]
        print(json.dumps({
            "code": code,
            "csv": text.getvalue().splitlines(),
            "imported": [m for m in heavy if m in sys.modules],
        }))
        """,
        str(ckpt),
    )
    header = "smiles,a,b,domain,nearest_similarity,error"
    assert out["code"] == 0 and out["csv"][0] == header and len(out["csv"]) == 3
    assert out["csv"][1].endswith(",unknown,,")  # CCO: no training record in the checkpoint
    assert out["imported"] == ["torch"]


def test_importing_the_packages_and_listing_them_imports_no_torch():
    out = _child(
        """
        import importlib, json, sys

        listed = {}
        for name in sys.argv[1:]:
            pkg = importlib.import_module(name)
            listed[name] = sorted(set(pkg.__all__) - set(dir(pkg)))
        from graphormer_urpe import PRESETS, __version__
        from graphormer_urpe.sequence import CORPORA, PE_SCHEMES
        print(json.dumps({
            "missing": listed,
            "presets": sorted(PRESETS),
            "corpora": list(CORPORA),
            "torch": "torch" in sys.modules,
        }))
        """,
        *PACKAGES,
    )
    assert out["missing"] == {name: [] for name in PACKAGES}  # dir() lists every public name
    assert "small" in out["presets"] and "pydoc" in out["corpora"]
    assert out["torch"] is False  # configs, presets and names are plain data


def _modules_under(package: str) -> list:
    pkg = importlib.import_module(package)
    names = [m.name for m in pkgutil.walk_packages(pkg.__path__, package + ".")]
    # a __main__ module runs its program when imported (python -m graphormer_urpe.cli)
    names = [n for n in names if not n.endswith(".__main__")]
    return [pkg] + [importlib.import_module(n) for n in names]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_is_the_object_of_its_module(package):
    pkg = importlib.import_module(package)
    # a package may re-export names of a package below it (training: inference, runtime)
    modules = [m for m in _modules_under("graphormer_urpe") if m is not pkg]
    for name in pkg.__all__:
        value = getattr(pkg, name)
        if name.startswith("__"):  # the package's own (__version__)
            continue
        owners = [
            m for m in modules if name in vars(m) and not isinstance(vars(m)[name], ModuleType)
        ]
        assert owners, f"{package}.{name} is defined in none of its modules"
        for m in owners:
            assert vars(m)[name] is value, f"{package}.{name} differs from {m.__name__}.{name}"
        exec(f"from {package} import {name} as imported", namespace := {})
        assert namespace["imported"] is value


def test_submodules_are_attributes_of_their_package_and_unknown_names_are_not():
    assert graphormer_urpe.graph is importlib.import_module("graphormer_urpe.graph")
    assert graphormer_urpe.training.run is importlib.import_module("graphormer_urpe.training.run")
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        _ = graphormer_urpe.no_such_name
    with pytest.raises(ImportError):
        exec("from graphormer_urpe.graph import NoSuchName", {})


def test_compiler_disable_runs_the_function_eagerly_inside_compiled_code():
    """As with ``@torch.compiler.disable``: a compiled caller calls the function, which runs
    eagerly (not traced); an undecorated function is traced (the control)."""
    import torch._dynamo

    seen: list[bool] = []

    def body(x: torch.Tensor) -> torch.Tensor:
        seen.append(torch.compiler.is_compiling())
        return x + 1

    disabled = compiler_disable(body)
    assert disabled.__name__ == "body" and disabled.__wrapped__ is body

    for fn, expected in ((disabled, [False, False]), (body, [True, True])):
        seen.clear()
        torch._dynamo.reset()
        compiled = torch.compile(lambda x, fn=fn: fn(x * 2) - 1, backend="eager")
        x = torch.arange(3.0)
        torch.testing.assert_close(compiled(x), x * 2)
        torch.testing.assert_close(compiled(x), x * 2)  # the cached graph calls it again
        assert seen == expected, (fn, seen)


def _predict_process(ckpt: Path, smiles: list[str], *extra: str) -> subprocess.CompletedProcess:
    """``graphormer-urpe predict`` as its own process (``main()`` without arguments, as the
    console script calls it), ``smiles`` on standard input, the CSV on standard output."""
    code = "import sys; from graphormer_urpe import cli; sys.exit(cli.main())"
    cmd = [sys.executable, "-c", code, "predict", "--checkpoint", str(ckpt), "--input", "-"]
    return subprocess.run(
        [*cmd, "--no-progress", *extra],
        input="".join(f"{s}\n" for s in smiles),
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
        check=False,
    )


def test_predict_ends_at_once_with_all_its_output(tmp_path):
    """The predict process skips Python's teardown (``os._exit``) after flushing: every row
    reaches a pipe, the last line reaches standard error, and the status is kept."""

    ckpt = tiny_checkpoint(tmp_path / "best.pt", "ogb")
    smiles = ["CCO", "c1ccccc1O", "CC(=O)Nc1ccc(O)cc1", "x(("] * 1500  # 6,000 rows, ~300 kB
    proc = _predict_process(ckpt, smiles, "--workers", "1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = proc.stdout.splitlines()
    assert len(rows) == len(smiles) + 1 and rows[-1].startswith("x((,")
    assert proc.stderr.splitlines()[-1] == (
        f"graphormer-urpe: wrote {len(smiles)} rows: {len(smiles) * 3 // 4} molecules "
        f"predicted, {len(smiles) // 4} could not be read, training domain unknown (the "
        "checkpoint does not record it)"
    )
    failed = _predict_process(tmp_path / "missing.pt", smiles[:1])
    assert failed.returncode == 2 and "missing.pt" in failed.stderr


def test_local_predict_never_imports_ray(domain_ckpt, tmp_path):
    """Without ``--engine ray``, ``predict`` (and the CLI it runs in) leaves Ray unimported."""
    smi = tmp_path / "in.smi"
    smi.write_text("\n".join(VALID[:4]) + "\n")
    out = tmp_path / "out.csv"
    code = (
        "import sys\n"
        "from graphormer_urpe.cli import main\n"
        f"main(['predict', '--checkpoint', {str(domain_ckpt)!r}, '--input', {str(smi)!r},"
        f" '--output', {str(out)!r}, '--no-progress', '--workers', '0'])\n"
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert len(out.read_text().splitlines()) == 5

#!/usr/bin/env python
"""Training speed of the language model's positional schemes, in one run (prints JSON).

Times training updates (forward, backward, clipping, Adam step, memory carried) of the
``lm`` command's model on the embedded corpus for each scheme. The schemes are timed in
turns (``rpe, xl, xl-urpe, rpe, ...``), so that the load of other processes falls on all of
them alike; each turn is ``--steps`` updates after ``--warmup`` untimed ones, and the report
gives the median tokens per second over ``--repeats`` turns and its ratio to the baseline
scheme (``rpe`` by default) measured in the same run. Two clocks are reported: wall time
(``tokens_per_s``) and this process's CPU time (``tokens_per_cpu_s``, all threads together),
which other processes on a shared machine disturb far less::

    python scripts/bench_lm.py --threads 2
    python scripts/bench_lm.py --preset cpu --schemes rpe xl xl-urpe --repeats 7
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F

from graphormer_urpe.sequence import LM_PE_SCHEMES, TransformerXL, lm_config
from graphormer_urpe.sequence.corpus import pydoc_corpus
from graphormer_urpe.sequence.lm import batchify


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=("cpu", "paper"), default="cpu", help="model preset")
    p.add_argument(
        "--schemes",
        nargs="+",
        choices=LM_PE_SCHEMES,
        default=["rpe", "xl", "xl-urpe"],
        help="schemes to time (default: rpe xl xl-urpe)",
    )
    p.add_argument("--baseline", choices=LM_PE_SCHEMES, default="rpe", help="ratio baseline")
    p.add_argument("--steps", type=int, default=10, help="timed updates per turn (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed updates per turn (default 2)")
    p.add_argument("--repeats", type=int, default=9, help="turns per scheme (default 9)")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    p.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    p.add_argument("--smoke", action="store_true", help="one update per scheme (a quick check)")
    args = p.parse_args(argv)
    if args.smoke:
        args.steps, args.warmup, args.repeats = 1, 0, 1
    return args


class _Trainer:
    """One scheme's model, optimizer, data and carried memory."""

    def __init__(self, pe: str, preset: str, vocab: int, train: torch.Tensor, device: str):
        self.config = lm_config(preset, "pydoc", pe, vocab_size=vocab)
        torch.manual_seed(0)
        self.model = TransformerXL(self.config.model).to(device).train()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=self.config.lr)
        self.data = batchify(train, self.config.batch_size).to(device)
        self.pos = 0
        self.memory: list[torch.Tensor] | None = None
        self.device = torch.device(device)

    def update(self) -> int:
        """One training update; returns the tokens it read."""
        n = self.config.model.tgt_len
        if self.pos + n + 1 > self.data.shape[1]:
            self.pos, self.memory = 0, None
        x = self.data[:, self.pos : self.pos + n]
        y = self.data[:, self.pos + 1 : self.pos + n + 1]
        self.pos += n
        logits, self.memory = self.model(x, self.memory)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 0.25)
        self.optimizer.step()
        return x.numel()

    def turn(self, warmup: int, steps: int) -> tuple[float, float]:
        """Tokens per wall-clock second and per CPU second over ``steps`` updates after
        ``warmup`` untimed ones."""
        for _ in range(warmup):
            self.update()
        self._sync()
        start, cpu = time.perf_counter(), time.process_time()
        tokens = sum(self.update() for _ in range(steps))
        self._sync()
        return tokens / (time.perf_counter() - start), tokens / (time.process_time() - cpu)

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    torch.set_num_threads(args.threads)
    corpus = pydoc_corpus()
    schemes = list(dict.fromkeys([args.baseline, *args.schemes]))
    trainers = {
        pe: _Trainer(pe, args.preset, len(corpus.vocab), corpus.train, args.device)
        for pe in schemes
    }
    wall: dict[str, list[float]] = {pe: [] for pe in schemes}
    cpu: dict[str, list[float]] = {pe: [] for pe in schemes}
    for _ in range(args.repeats):
        for pe in schemes:
            rate, cpu_rate = trainers[pe].turn(args.warmup, args.steps)
            wall[pe].append(rate)
            cpu[pe].append(cpu_rate)
    base = statistics.median(wall[args.baseline])
    cpu_base = statistics.median(cpu[args.baseline])
    cfg = trainers[args.baseline].config
    result: dict[str, Any] = {
        "benchmark": "lm",
        "measure": "training tokens per second (median over turns)",
        "preset": args.preset,
        "batch_size": cfg.batch_size,
        "tgt_len": cfg.model.tgt_len,
        "mem_len": cfg.model.mem_len,
        "threads": args.threads,
        "device": args.device,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "steps_per_turn": args.steps,
        "repeats": args.repeats,
        "baseline": args.baseline,
        "schemes": {
            pe: {
                "median_tokens_per_s": round(statistics.median(wall[pe]), 1),
                "ratio_to_baseline": round(statistics.median(wall[pe]) / base, 3),
                "median_tokens_per_cpu_s": round(statistics.median(cpu[pe]), 1),
                "cpu_ratio_to_baseline": round(statistics.median(cpu[pe]) / cpu_base, 3),
                "tokens_per_s": [round(x, 1) for x in wall[pe]],
                "tokens_per_cpu_s": [round(x, 1) for x in cpu[pe]],
                "num_parameters": sum(p.numel() for p in trainers[pe].model.parameters()),
            }
            for pe in schemes
        },
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The reference trainer's options, defined once: one row per option, from which the trainer's argparse
parser (`add_to_parser`) and `commscope run`'s typer options (commscope/commands/run.py) are both made,
and `to_argv` turns `commscope run`'s values back into the trainer's command line. A new trainer option
is one row here; its checks that need more than a type or a choice go in `train.check_args`.

Invariants:
- Row order is the parser's order, hence the key order of config.json's "args" (vars of the namespace),
  and the order `commscope run --help` lists the options in.
- `commscope run` forwards an option only when it is given (its typer defaults are None / False), so the
  defaults below, some of which depend on the device and preset (None here, filled by
  `train.parse_args`), are the trainer's alone.
- Importing this module is cheap (no torch): `commscope run` reads the table when the CLI starts.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Mapping

FLAG, MANY = "flag", "many"  # a switch (store_true), and a repeatable string option (append)


@dataclass(frozen=True)
class Opt:
    """One trainer option: `--name` takes a value of `type` (int, float, str, FLAG or MANY)."""

    name: str  # the flag without its dashes, kebab-case: "batch-size"
    type: Any
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    metavar: str | None = None

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


TRACE_MODES = ("off", "light", "full")

TRAINER_OPTIONS: tuple[Opt, ...] = (
    Opt("device", str, None, "cpu | cuda. Default: cuda if available, else cpu.", ("cpu", "cuda")),
    Opt("backend", str, None, "gloo | nccl. Default: nccl on cuda, gloo on cpu; gloo with cuda lets several "
        "ranks share one GPU.", ("gloo", "nccl")),
    Opt("preset", str, None, "tiny | speedrun. Default: speedrun on cuda, tiny on cpu."),
    Opt("steps", int, None, "Training steps. Default: 40 (tiny), 50 (speedrun)."),
    Opt("seed", int, 0, "Seed of the initial parameters and synthetic data. Default: 0."),
    Opt("batch-size", int, None, "Global batch in sequences. Default: 16 (tiny), 24 per rank (speedrun)."),
    Opt("grad-accum", int, 1, "Micro-steps per step. Default: 1."),
    Opt("lr", float, None, "NorMuon learning rate. Default: 0.02."),
    Opt("adam-lr", float, None, "Adam learning rate. Default: 0.008."),
    Opt("wd", float, None, "Weight decay. Default: 0.01."),
    Opt("head-layout", str, "transposed", "transposed | standard LM head storage. Default: transposed.",
        ("transposed", "standard")),
    Opt("compile", FLAG, False, "torch.compile the model (GPU speed; the first steps pay for compilation)."),
    Opt("fp8-head", FLAG, False, "The record's FP8 LM head matmuls (CUDA only; numbers change slightly)."),
    Opt("fp32-residual", FLAG, False, "Keep the residual stream fp32 under CUDA autocast (default bf16, as "
        "the record)."),
    Opt("comm-schedule", str, "explicit", "explicit | hooks. Default: explicit.", ("explicit", "hooks")),
    Opt("scatter-order", str, None, "Comma list of the 13 labels: order of gradient reduces. Default: the param table's."),
    Opt("work-order", str, None, "Comma list of the 13 labels: order of optimizer updates. Default: the param table's."),
    Opt("split-step", int, None, "Step at which embed and lm_head are untied. Default: never (tied throughout)."),
    Opt("optimizer-partition", str, "bank", "bank | alpha-lpt: who updates each NorMuon matrix (docs/plan.md). "
        "Default: bank.", ("bank", "alpha-lpt")),
    Opt("data", str, None, "Glob of modded-nanogpt .bin shards. Default: synthetic tokens."),
    Opt("trace", str, "light", "off | light | full. Default: light.", TRACE_MODES),
    Opt("profile", str, None, "torch.profiler window START:STOP, or one step N (N:N+1) (steps; STOP at most "
                              "--steps). Default: none."),
    Opt("with-stack", FLAG, False, "Python stacks in the profiler window (needs --profile, or --trace full)."),
    Opt("flush", str, "step", "step | overlap: when a step's records are written. step: at the step end "
        "(a killed rank keeps every finished step). overlap (CUDA): when the next step's first region ends, "
        "hidden behind its GPU work; a SIGKILL then may lose the last step. Default: step.", ("step", "overlap")),
    # the help spells the optional fields out: "KIND@rank=R,step=S[,label=L][,ms=M][,how=op|size]" as one word is wider
    # than the help column of an 80-column `commscope run --help`, which cuts it
    Opt("inject", MANY, None, "Inject a fault, repeatable: KIND@rank=R,step=S, optionally followed by "
        ",label=L, ,ms=M (delay) and ,how=op|size (desync), with KIND crash|hang|delay|desync (docs/faults.md).",
        metavar="KIND@rank=R,step=S[,label=L][,ms=M][,how=op|size]"),
    Opt("hang-timeout", float, 300.0, "Seconds a collective wait may block before the rank reports a hang "
        "and the run ends. Default: 300."),
)


def add_to_parser(parser: argparse.ArgumentParser) -> None:
    """Add every trainer option to `parser`."""
    for o in TRAINER_OPTIONS:
        flag = f"--{o.name}"
        if o.type == FLAG:
            parser.add_argument(flag, action="store_true", help=o.help)
        elif o.type == MANY:
            parser.add_argument(flag, action="append", default=o.default, metavar=o.metavar, help=o.help)
        else:
            parser.add_argument(flag, type=o.type, default=o.default, choices=o.choices, metavar=o.metavar,
                                help=o.help)


def to_argv(values: Mapping[str, Any]) -> list[str]:
    """The trainer's command line for the given options (by dest); None, False and empty mean not given.
    Each value is joined to its option (`--profile=-1:2`): argparse takes a separate value that starts
    with `-` for an option of its own and refuses with "expected one argument", where the trainer's own
    check says what a valid value is."""
    argv: list[str] = []
    for o in TRAINER_OPTIONS:
        v = values.get(o.dest)
        if v is None or v is False:
            continue
        if o.type == FLAG:
            argv.append(f"--{o.name}")
        elif o.type == MANY:
            argv += [f"--{o.name}={item}" for item in v]
        else:
            argv.append(f"--{o.name}={v}")
    return argv

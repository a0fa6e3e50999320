"""`commscope run`: train the reference model on N ranks through torch.distributed.run and record the run.

A thin typer wrapper and commscope's one way into the reference trainer (instrumented_model). Its
options are the launcher's own (`--nproc`, `--out`, the node topology) around the trainer's, which are
made from the trainer's option table (instrumented_model.options, read when the CLI starts; it imports no
torch). The values given are turned back into the trainer's argument list and handed, with a Topology,
to the trainer's launcher, which validates them with the trainer's own parser (so the two can never
disagree about what an option means) and does the work. `launcher()` is the only import of the launcher
in commscope; nothing else in commscope imports the trainer.
"""
from __future__ import annotations

import inspect
from typing import List, Optional

import typer

_LAUNCHER_HEAD = (
    ("nproc", Optional[int], typer.Option(None, "--nproc", help="Ranks on this node. Default: the number of GPUs "
                                           "with --device cuda, 2 on CPU. The job's ranks must shard the preset "
                                           "evenly: tiny and speedrun run on 1, 2, 4 or 8 (commscope plan "
                                           "--world-size N says why another is refused).")),
    ("out", Optional[str], typer.Option(None, "--out", help="Run directory: new, empty, or (with --overwrite) an "
                                         "earlier commscope run. Default: runs/<timestamp>-<preset>-<world size>.")),
    ("overwrite", bool, typer.Option(False, "--overwrite", help="Replace the commscope run in --out (kept aside "
                                     "until the new run finishes its first step; back in place if it never does).")),
)
_LAUNCHER_TAIL = (
    ("nnodes", int, typer.Option(1, help="Number of nodes (torch.distributed.run).")),
    ("node_rank", Optional[int], typer.Option(None, help="This node's rank with --master-addr (torch.distributed.run). "
                                              "Default: none (one node; with --rdzv-endpoint the rendezvous "
                                              "assigns it).")),
    ("rdzv_endpoint", Optional[str], typer.Option(None, help="HOST:PORT of the c10d rendezvous for several nodes. "
                                                  "Default: none (one node: a standalone rendezvous on a free "
                                                  "local port).")),
    ("master_addr", Optional[str], typer.Option(None, help="Static rendezvous address (with --node-rank). Default: "
                                                "none; on one node, 127.0.0.1 where only --master-port is given "
                                                "(several nodes need it).")),
    ("master_port", Optional[int], typer.Option(None, help="Static rendezvous port. Default: none; 29500 where only "
                                                "--master-addr is given.")),
)


def launcher():
    """The trainer's launcher module (instrumented_model.launcher), imported on first use."""
    from instrumented_model import launcher as mod

    return mod


def _trainer_params() -> list[tuple[str, object, object]]:
    """(name, annotation, typer option) of each trainer option: forwarded only when given, so every
    default here is "not given" and the trainer keeps its own."""
    from instrumented_model.options import FLAG, MANY, TRAINER_OPTIONS

    params = []
    for o in TRAINER_OPTIONS:
        flag = f"--{o.name}"
        if o.type == FLAG:
            params.append((o.dest, bool, typer.Option(False, flag, help=o.help)))
        elif o.type == MANY:
            params.append((o.dest, Optional[List[str]], typer.Option(None, flag, help=o.help)))
        else:
            params.append((o.dest, Optional[o.type], typer.Option(None, flag, help=o.help)))
    return params


def run(**values) -> None:
    """Train the reference model on N ranks, record the run into a run directory, and summarize it.

    Several nodes: run it on each with the same options and --out, on a shared filesystem (docs/run_format.md).
    """
    from instrumented_model.options import to_argv

    mod = launcher()
    topology = mod.Topology(nproc=values["nproc"], nnodes=values["nnodes"], node_rank=values["node_rank"],
                            rdzv_endpoint=values["rdzv_endpoint"], master_addr=values["master_addr"],
                            master_port=values["master_port"])
    from commscope.commands._run_view import TerminalView

    summary = mod.launch_training(to_argv(values), topology, values["out"], TerminalView(),
                                  overwrite=values["overwrite"])
    if summary["exit_code"]:
        raise typer.Exit(summary["exit_code"])  # 1 failed, 128 + signal interrupted: summary.json's exit_code


def register(app: typer.Typer) -> None:
    params = [*_LAUNCHER_HEAD, *_trainer_params(), *_LAUNCHER_TAIL]
    # typer reads a command's options from its signature: `run` takes them all as keyword arguments
    run.__signature__ = inspect.Signature(
        [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=ann)
         for name, ann, opt in params])
    run.__annotations__ = {name: ann for name, ann, _ in params} | {"return": None}
    app.command("run")(run)

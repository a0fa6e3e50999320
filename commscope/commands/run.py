"""`commscope run`: train the reference model on N ranks through torch.distributed.run and record the run.

A thin typer wrapper: it turns options into the trainer's argument list and a Topology, and hands both to
`commscope.launch.launch_training`, which validates them with the trainer's own parser (so the two can
never disagree about what an option means) and does the work.
"""
from __future__ import annotations

from typing import List, Optional

import typer

# options forwarded verbatim (as --kebab-case VALUE) to instrumented_model.train when given
_TRAINER_FLAGS = ("optimizer_partition", "device", "backend", "preset", "steps", "seed", "batch_size", "grad_accum", "lr", "adam_lr",
                  "wd", "head_layout", "comm_schedule", "scatter_order", "work_order", "split_step", "data",
                  "trace", "profile", "hang_timeout")


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run(
        nproc: Optional[int] = typer.Option(None, "--nproc", help="Ranks on this node. Default: the number of GPUs with --device cuda, 2 on CPU."),
        out: Optional[str] = typer.Option(None, "--out", help="Run directory. Default: runs/<timestamp>-<preset>-<world size>."),
        device: Optional[str] = typer.Option(None, help="cpu | cuda. Default: cuda if available, else cpu."),
        backend: Optional[str] = typer.Option(None, help="gloo | nccl. Default: nccl on cuda, gloo on cpu; gloo with cuda lets several ranks share one GPU."),
        preset: Optional[str] = typer.Option(None, help="tiny | speedrun. Default: speedrun on cuda, tiny on cpu."),
        steps: Optional[int] = typer.Option(None, help="Training steps. Default: 40 (tiny), 50 (speedrun)."),
        seed: Optional[int] = typer.Option(None, help="Seed of the initial parameters and synthetic data. Default: 0."),
        batch_size: Optional[int] = typer.Option(None, help="Global batch in sequences. Default: 16 (tiny), 24 per rank (speedrun)."),
        grad_accum: Optional[int] = typer.Option(None, help="Micro-steps per step. Default: 1."),
        lr: Optional[float] = typer.Option(None, help="NorMuon learning rate."),
        adam_lr: Optional[float] = typer.Option(None, help="Adam learning rate."),
        wd: Optional[float] = typer.Option(None, help="Weight decay."),
        head_layout: Optional[str] = typer.Option(None, help="transposed | standard LM head storage. Default: transposed."),
        comm_schedule: Optional[str] = typer.Option(None, help="explicit | hooks. Default: explicit."),
        scatter_order: Optional[str] = typer.Option(None, help="Comma list of the 13 labels: order of gradient reduces."),
        work_order: Optional[str] = typer.Option(None, help="Comma list of the 13 labels: order of optimizer updates."),
        split_step: Optional[int] = typer.Option(None, help="Step at which embed and lm_head are untied."),
        optimizer_partition: Optional[str] = typer.Option(None, help="bank | alpha-lpt: who updates each NorMuon matrix (docs/plan.md). Default: bank."),
        data: Optional[str] = typer.Option(None, help="Glob of modded-nanogpt .bin shards. Default: synthetic tokens."),
        trace: Optional[str] = typer.Option(None, help="off | light | full. Default: light."),
        profile: Optional[str] = typer.Option(None, help="torch.profiler window START:STOP (steps)."),
        with_stack: bool = typer.Option(False, "--with-stack", help="Python stacks in the profiler window."),
        compile: bool = typer.Option(False, "--compile", help="torch.compile the model (GPU speed; the first steps pay for compilation)."),
        fp8_head: bool = typer.Option(False, "--fp8-head", help="The record's FP8 LM head matmuls (CUDA only; numbers change slightly)."),
        fp32_residual: bool = typer.Option(False, "--fp32-residual", help="Keep the residual stream fp32 under CUDA autocast (default bf16, as the record)."),
        inject: Optional[List[str]] = typer.Option(None, "--inject", help="Inject a fault, repeatable: "
                                                   "KIND@rank=R,step=S[,label=L][,ms=M] with KIND crash|hang|delay|desync (docs/faults.md)."),
        hang_timeout: Optional[float] = typer.Option(None, "--hang-timeout", help="Seconds a collective wait may "
                                                     "block before the rank reports a hang and the run ends. Default: 300."),
        nnodes: int = typer.Option(1, help="Number of nodes (torch.distributed.run)."),
        node_rank: Optional[int] = typer.Option(None, help="This node's rank with --master-addr (torch.distributed.run)."),
        rdzv_endpoint: Optional[str] = typer.Option(None, help="HOST:PORT of the c10d rendezvous for several nodes."),
        master_addr: Optional[str] = typer.Option(None, help="Static rendezvous address (with --node-rank)."),
        master_port: Optional[int] = typer.Option(None, help="Static rendezvous port."),
    ) -> None:
        """Train the reference model on N ranks, record the run into a run directory, and summarize it.

        With several nodes give every node the same --out on a shared filesystem; node 0 writes summary.json.
        """
        from commscope.launch import Topology, launch_training

        values = locals()
        argv: list[str] = []
        for name in _TRAINER_FLAGS:
            if values[name] is not None:
                argv += [f"--{name.replace('_', '-')}", str(values[name])]
        if with_stack:
            argv.append("--with-stack")
        if compile:
            argv.append("--compile")
        for flag, on in (("--fp8-head", fp8_head), ("--fp32-residual", fp32_residual)):
            if on:
                argv.append(flag)
        for spec in inject or ():
            argv += ["--inject", spec]
        topology = Topology(nproc=nproc, nnodes=nnodes, node_rank=node_rank, rdzv_endpoint=rdzv_endpoint,
                            master_addr=master_addr, master_port=master_port)
        summary = launch_training(argv, topology, out)
        if summary["status"] != "completed":
            raise typer.Exit(130 if summary["status"] == "interrupted" else 1)


"""``perfdoctor demo``: what perfdoctor finds in the bundled engine (live on a GPU, else a
recording and a short CPU run); the rendering is :mod:`perfdoctor.demo.show`."""

from __future__ import annotations

from pathlib import Path

import typer



def demo_command(
    out: Path = typer.Option(Path("perfdoctor-runs"), "--out", help="Folder that receives the live run bundles."),
    steps: int = typer.Option(12, "--steps", min=2, help="decode steps to trace in each live run."),
    recorded: bool = typer.Option(False, "--recorded", help="Only show the shipped GPU recording (no live run), on any machine."),
    more: bool = typer.Option(False, "--more", help="Show every recorded run's top findings in full, not just the first run's."),
) -> None:
    """What perfdoctor finds in a real program: the bundled Llama-3.2-1B engine, eager vs CUDA graph vs fused vs megakernel.

    On a machine without a GPU: first the ranked reports and diffs of runs recorded on an H200 (shipped with perfdoctor, clearly marked as recorded), then a short live `perfdoctor run` of the tiny engine on this CPU. On a GPU: `perfdoctor run` of the eager, graph, fused and (on a Hopper GPU) megakernel variants live, their findings and the diffs.
    """
    from rich.console import Console
    from rich.text import Text

    from perfdoctor.demo.show import WIDTH, find_recording, live_cpu, live_runs, make_console, plan, show_recording
    from perfdoctor.record.tools import gpu_present

    console = make_console()
    progress = Console(stderr=True, width=min(Console(stderr=True).width, WIDTH), highlight=False)
    gpu = gpu_present() and not recorded
    if gpu:
        from perfdoctor.engine.megakernel import unsupported_gpu

        why_not = unsupported_gpu()
        runs, pairs = plan("gpu", megakernel=why_not is None)
        console.print(Text(f"perfdoctor demo: profiling the bundled engine live on this GPU ({', '.join(label for label, _ in runs)}).", style="bold"))
        if why_not is not None:
            console.print(Text(f"megakernel skipped: it {why_not}.", style="yellow"))
        code = live_runs(console, progress, runs, pairs, out, steps, ["torch", "nvml"])
        raise typer.Exit(code)
    rec, why = find_recording()
    if recorded:
        if rec is None:
            console.print(Text(f"No recording to show: {why}.", style="yellow"))
            raise typer.Exit(1)
        show_recording(console, rec, more, progress)
        return
    if rec is None:
        console.print(Text("perfdoctor demo: there is no NVIDIA GPU on this machine, so a short live run on this CPU.", style="bold"))
        console.print(Text(f"No GPU recording to show first: {why}.", style="yellow"))
    else:
        console.print(
            Text(
                "perfdoctor demo: there is no NVIDIA GPU on this machine, so first what perfdoctor "
                "found on one (a recording), then a short live run on this CPU.",
                style="bold",
            )
        )
        show_recording(console, rec, more, progress)
    raise typer.Exit(live_cpu(console, progress, out, steps=min(steps, 6), tokens=16))

"""The terminal view of ``python -m profiler fit``: the breakdown table, the verdict against the card, the advice.

Reads only the result dict that ``fit --json`` prints (profiler/fit/check.py ``fit_result``), so the view and the
JSON can never disagree about a figure.
"""
from __future__ import annotations

from pathlib import Path

from profiler.fit.sizes import format_bytes


def _rows(bd: dict) -> list[tuple[str, int, str]]:
    """(part, bytes, how it is counted) in the order memory is allocated in a step."""
    per_param = bd["weights_bytes"] / max(1, bd["params"])
    train = bd["mode"] == "train"
    return [
        ("weights", bd["weights_bytes"], f"{bd['params']:,} params (+ buffers), ~{per_param:.0f} B each"),
        ("gradients", bd["gradients_bytes"], "one per trainable param" if train else "none (infer)"),
        ("optimizer state", bd["optimizer_bytes"], bd["optimizer"]),
        ("activations", bd["activations_bytes"],
         f"{format_bytes(bd['activations_per_sample_bytes'])}/sample x {bd['batch_size']} (measured)"),
        ("workspace", bd["workspace_bytes"], "CUDA context, cuDNN/cuBLAS workspace, fragmentation"),
    ]


def print_fit(result: dict, png: Path | None) -> None:
    """Print the table, whether it fits (when a GPU size is known), the recommendations, notes and the plot path."""
    from rich.console import Console
    from rich.table import Table

    bd = result["breakdown"]
    console = Console()
    prec = bd["precision"] + (" + AMP" if bd["amp"] else "")
    title = (f"{bd['model']} {bd['mode']}, batch {bd['batch_size']}, {prec}, {bd['image_size']} px"
             + (f", {bd['optimizer']}" if bd["mode"] == "train" else ""))
    table = Table(title=title)
    table.add_column("part")
    table.add_column("memory", justify="right")
    table.add_column("how it is counted")
    for name, value, how in _rows(bd):
        table.add_row(name, format_bytes(value), how)
    table.add_row("[bold]total[/bold]", f"[bold]{format_bytes(bd['total_bytes'])}[/bold]", "")
    console.print(table)
    if result["gpu_bytes"] is not None:
        verdict = "[green]fits[/green]" if result["fits"] else "[red]does not fit[/red]"
        console.print(f"GPU {result['gpu_label']}: {verdict}, headroom {format_bytes(result['headroom_bytes'])}; "
                      f"largest batch that fits: {result['max_batch_size']}")
        for rec in result["recommendations"]:
            console.print(f"  - {rec['action']}: {rec['reason']} -> {rec['expected_gain']}")
    for note in result["notes"]:
        console.print(f"[dim]note: {note}[/dim]")
    console.print(f"[dim]activations: {bd['method']}[/dim]")
    if png is not None:
        console.print(f"plot: {png}")

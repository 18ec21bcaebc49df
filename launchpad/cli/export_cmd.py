"""`launchpad export JOB`: merge a job's LoRA/QLoRA adapter into its base model (or take a full
fine-tune's weights) and write a standard Hugging Face model folder for vLLM / TGI.

Runs here, on this machine (it needs the [train] extra: torch, transformers, peft); the checkpoint
comes from the job's store, the base model from where the recipe says. Module import stays light.
"""

from __future__ import annotations

from pathlib import Path

import click

from ._common import console, emit_json, err_console, esc, json_option


@click.command("export")
@click.argument("job")
@click.option("--out", "-o", type=click.Path(file_okay=False), default=None,
              help="Model folder to write (default: ./<job-id>-merged): new, empty, or one a previous export wrote.")
@click.option("--step", type=click.IntRange(min=1), default=None,
              help="Export this checkpoint (default: the newest complete one).")
@click.option("--dtype", type=click.Choice(["auto", "bfloat16", "float16", "float32"]), default="auto", show_default=True,
              help="Weights dtype; auto = the base model's own.")
@json_option
def export(job: str, out: str | None, step: int | None, dtype: str, as_json: bool) -> None:
    """Merge JOB's adapter into the base model and write a standard HF model folder (vLLM/TGI)."""
    import importlib.util

    from ..errors import BadInput
    from ..train.export import check_destination

    if out is not None:  # a folder holding anything else is refused before any work (never deleted)
        check_destination(Path(out))
    missing = [m for m in ("torch", "transformers", "peft") if importlib.util.find_spec(m) is None]
    if missing:
        raise BadInput(f"export needs the [train] extra here (missing: {', '.join(missing)}): pip install 'launchpad[train]'")

    from ..train.export import export_job
    from ._run import open_lifecycle

    lc = open_lifecycle(True)
    record = lc.db.job(job)
    job_id = record.id
    uri = record.spec.checkpoint_uri
    if not uri:  # the provider's default store, as `resume` finds it
        provider = lc.providers.get(record.get("provider") or "")
        uri = provider.default_checkpoint_uri() if provider else None
    if not uri:
        raise BadInput(f"{job_id}: no checkpoint store is known for this job (its provider is not configured here)")
    target = check_destination(Path(out) if out else Path.cwd() / f"{job_id}-merged")
    say = (lambda _m: None) if as_json else (lambda m: err_console().print(m, markup=False))
    import contextlib
    import sys

    # Libraries print to stdout while loading (DeepSpeed's accelerator probe, ...): stdout is for our
    # result (and --json), so everything said while exporting goes to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        result = export_job(job_id, record.spec.recipe_model(), uri, target, step=step, dtype=dtype, log=say)
    if as_json:
        emit_json({"job": job_id, "path": str(result.path), "step": result.step, "checkpoint": result.checkpoint_uri,
                   "merged_adapter": result.merged_adapter, "dtype": result.dtype})
    else:
        console().print(f"[green]✓[/] {esc(result.path)}: {esc(job_id)} step {result.step} "
                        f"({'adapter merged' if result.merged_adapter else 'full weights'}, {result.dtype}); "
                        f"load it with AutoModelForCausalLM.from_pretrained or `vllm serve {esc(result.path)}`")

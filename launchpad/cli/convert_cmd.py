"""`launchpad convert AXOLOTL.yml`: the equivalent launchpad recipe, written out (launchpad.axolotl)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import click

from ._common import console, emit_json, esc, json_option


@click.command("convert")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option("--out", "-o", type=click.Path(dir_okay=False), default=None,
              help="Recipe file to write (default: print it). An existing file is kept unless --force.")
@click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
@json_option
def convert(config: str, out: str | None, force: bool, as_json: bool) -> None:
    """Write the launchpad recipe an Axolotl CONFIG amounts to: the translations made explicit, the keys
    dropped listed in its header, and a `resources:` block sized by the plan's memory estimate. A key
    launchpad refuses (rl, fsdp, plugins, ...) is exit 2 with its reason, as for `validate`."""
    import yaml

    from ..axolotl import translate
    from ..errors import BadInput
    from ..recipe import Recipe, load_recipe
    from ..yamlsafe import read_yaml_mapping

    recipe = load_recipe(config)  # every problem, as `validate` says it (exit 2)
    data, notes, _ = translate(read_yaml_mapping(config), Path(os.path.abspath(config)), set(Recipe.model_fields))
    data = {"name": data.pop("name"), "adapter": data.pop("adapter", recipe.adapter), **data}
    resources, sized = _resources(recipe, data.get("resources"))
    if resources:
        data["resources"] = resources
    header = [f"launchpad recipe converted from the Axolotl config {config} (`launchpad convert`)."]
    header += [n.replace("warning: ", "", 1) for n in notes]
    if sized:
        header.append(sized)
    text = "".join(f"# {line}\n" for line in header) + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    if out:
        target = Path(out)
        if target.exists() and not force:
            raise BadInput(f"--out {out}: exists; choose another file or add --force")
        _rebase_paths(data, recipe, Path(os.path.abspath(config)).parent, Path(os.path.abspath(out)).parent)
        text = "".join(f"# {line}\n" for line in header) + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
        target.write_text(text, encoding="utf-8")
        load_recipe(target)  # what it wrote validates, its relative paths read from its own folder
    if as_json:
        emit_json({"config": config, "recipe": data, "notes": notes, "written": out})
    elif out:
        console().print(f"[green]✓[/] wrote {esc(out)} ({esc(recipe.name)}, adapter {esc(recipe.adapter)}); "
                        f"next: `launchpad plan {esc(out)}`", soft_wrap=True)
    else:
        click.echo(text, nl=False)


def _rebase_paths(data: dict[str, Any], recipe: Any, source_dir: Path, out_dir: Path) -> None:
    """Relative local paths of the config, made relative to the folder the recipe is written to (a recipe
    reads them from its own folder): the validated recipe holds each one resolved."""
    if source_dir == out_dir:
        return

    def rebased(given: Any, resolved: Any) -> Any:
        if (isinstance(given, str) and isinstance(resolved, str) and not os.path.isabs(given) and "://" not in given
                and os.path.abspath(source_dir / Path(given).expanduser()) == resolved and os.path.exists(resolved)):
            return os.path.relpath(resolved, out_dir)  # not a preset name or a Hub id: those stay as written
        return given

    for entry, ds in zip(data.get("datasets") or [], recipe.datasets, strict=False):
        if isinstance(entry, dict):
            entry["path"] = rebased(entry.get("path"), ds.path)
    for key in ("base_model", "deepspeed"):
        if key in data:
            data[key] = rebased(data[key], getattr(recipe, key))
    if isinstance(data.get("checkpoint"), dict) and "resume_from" in data["checkpoint"]:
        data["checkpoint"]["resume_from"] = rebased(data["checkpoint"]["resume_from"], recipe.checkpoint.resume_from)


def _resources(recipe: Any, given: Any) -> tuple[dict[str, Any] | None, str | None]:
    """`resources` with a GPU spec from the plan's per-GPU VRAM need ("24GB.."), unless the file sets one."""
    if isinstance(given, dict) and given.get("gpu"):
        return given, None
    from ..planner.need import need_from_recipe

    try:
        need = need_from_recipe(recipe)
    except Exception:  # the estimate is a convenience here: a model it cannot size leaves the block out
        return given, None
    if not need.vram_gb:
        return given, None
    gb = int(math.ceil(need.vram_gb))
    why = f"resources.gpu: {gb}GB.. from the plan's estimate ({need.vram_gb:.1f} GB per GPU); any GPU with that much"
    return {**(given or {}), "gpu": f"{gb}GB.."}, why

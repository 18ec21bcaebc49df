"""`launchpad convert AXOLOTL.yml`: the equivalent launchpad recipe, written out (launchpad.axolotl)."""

from __future__ import annotations

import math
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
    import os

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
        target.write_text(text, encoding="utf-8")
        load_recipe(target)  # what it wrote validates (relative paths: next to the config, as before)
    if as_json:
        emit_json({"config": config, "recipe": data, "notes": notes, "written": out})
    elif out:
        console().print(f"[green]✓[/] wrote {esc(out)} ({esc(recipe.name)}, adapter {esc(recipe.adapter)}); "
                        f"next: `launchpad plan {esc(out)}`", soft_wrap=True)
    else:
        click.echo(text, nl=False)


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

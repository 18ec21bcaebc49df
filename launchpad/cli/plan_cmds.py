"""`launchpad plan RECIPE` and `launchpad offers --gpu SPEC`: thin renderers over launchpad.planner.

Module import stays light (click only): the planner, rich and pydantic load inside the commands.
"""

from __future__ import annotations

from typing import Any

import click

from ._common import console, emit_json, json_option

_DIM_LABELS = {
    "hardware_availability": "hardware availability",
    "software_stack": "software stack",
    "storage_io": "storage I/O",
    "distributed": "distributed training",
    "cost_transparency": "cost transparency",
    "ops_friendliness": "ops friendliness",
    "compliance_region": "compliance / region",
}


def _hours(h: float) -> str:
    s = h * 3600
    if s < 90:
        return f"{s:.0f}s"
    if h < 1.5:
        return f"{s / 60:.0f}m"
    if h < 48:
        return f"{h:.1f}h"
    return f"{h / 24:.1f}d"


def _money(x: float) -> str:
    return f"${x:,.2f}" if x >= 0.01 or x == 0 else f"${x:.4f}"


def _rate(x: float) -> str:
    """A price per hour: cents matter below $10 ($0.7045 vs $0.8048 is the difference between two hosts)."""
    return f"${x:,.4f}" if x < 10 else f"${x:,.2f}"


def _gpu(o: Any) -> str:
    if not o.gpu:
        return f"cpu ({o.vcpus:g} vCPU)" if o.vcpus else "cpu"
    return f"{o.gpu_count}x{o.gpu} {o.gpu_memory_gb:g}G"


def _host(o: Any) -> str:
    if not o.vcpus and not o.memory_gb:
        return "-"
    return f"{o.vcpus:g}cpu {o.memory_gb:g}G"


def _where(o: Any) -> str:
    return o.zone or o.region


def _width(width: int | None) -> int:
    return width if width is not None else console().width


def _offers_table(title: str, rows: list, *, width: int | None = None):
    """Ranked offers, one line each at any width (see _tables): price and cost are kept longest."""
    from ._tables import Col, fit_table

    cols = [Col("#", "right", 4, whole=True), Col("provider", priority=8), Col("instance type", priority=7),
            Col("GPU", priority=9), Col("region", priority=6), Col("$/h", "right", 10, whole=True),
            Col("est. time", "right", 6, whole=True), Col("est. cost", "right", 10, whole=True),
            Col("score", "right", 2, whole=True), Col("stopped", "right", 3, whole=True), Col("host", priority=1)]
    cells = []
    for i, r in enumerate(rows, 1):
        o = r.offer
        cells.append([str(i), o.provider, o.instance_type + (" (spot)" if o.spot else ""), _gpu(o), _where(o),
                      _rate(o.price), _hours(r.est_hours), _money(r.est_cost), f"{r.score:.2f}",
                      _per_day(r.breakdown.get("stopped_usd_per_day")), _host(o)])
    return fit_table(title, cols, cells, _width(width))


def _per_day(x: float | None) -> str:
    return "-" if x is None else f"{_money(x)}/d"


def _stopped_line(need: Any, r: Any) -> str | None:
    """What the best offer keeps billing once autostop has stopped it (the "stopped" column, which narrow
    terminals drop), e.g. "stopped (...): $0.13/day (disk, 50 GB)"; None when nothing does."""
    per_day = r.breakdown.get("stopped_usd_per_day")
    if per_day is None:
        return None
    nodes = f"{need.nodes} x " if need.nodes > 1 else ""
    line = (f"stopped (autostop.action: stop): {_money(per_day)}/day (disk, {nodes}{need.disk_gb} GB) for the "
            "first offer")
    if r.breakdown.get("nvme_lost_on_stop"):
        line += "; the data on its local NVMe does not survive a stop"
    return f"[dim]{line}[/]"


def _market_table(title: str, rows: list, *, width: int | None = None):
    """`offers` rows (MarketOffer), one line each at any width."""
    from ._tables import Col, fit_table

    cols = [Col("provider", priority=8), Col("instance type", priority=7), Col("GPU", priority=9),
            Col("region", priority=6), Col("$/h", "right", 10, whole=True), Col("spot $/h", "right", 6, whole=True),
            Col("configured", priority=5, whole=True), Col("host", priority=2)]
    cells = []
    for m in rows:
        o = m.offer
        sp = o.spot_price_per_hour
        cells.append([o.provider, o.instance_type, _gpu(o), _where(o), _rate(o.price_per_hour),
                      "-" if sp is None else _rate(sp), "[green]yes[/]" if m.configured else "[dim]no[/]", _host(o)])
    return fit_table(title, cols, cells, _width(width))


def _need_line(need: Any) -> str:
    parts = []
    if need.vram_gb is not None:
        parts.append(f"[bold]{need.vram_gb:.1f} GB[/] VRAM per GPU")
    parts.append(f"{need.adapter} on {need.model}" + (f" ({need.params / 1e9:.2f}B params)" if need.params else ""))
    parts.append(f"GPU {need.gpu_text}" if need.gpu_text else "any GPU or CPU")
    if need.nodes > 1:
        parts.append(f"{need.nodes} nodes")
    if need.spot:
        parts.append(f"spot: {need.spot}")
    if need.regions:
        parts.append("regions " + ",".join(need.regions))
    if need.max_price:
        parts.append(f"max ${need.max_price:g}/h")
    if need.disk_gb:
        parts.append(f"disk {need.disk_gb} GB" + (" per node" if need.nodes > 1 else ""))
    return "Need: " + "; ".join(parts)


def _explain(plan: Any, con: Any) -> None:
    from rich.table import Table

    from ..planner import rejection_summary
    from ..planner.settings import planner_settings

    need = plan.need
    pool = plan.ranked or plan.unconfigured
    if pool:
        win = pool[0]
        others = list(pool[1:])
        runner = others[0] if others else None
        cheapest = min(pool, key=lambda r: (r.offer.price, -r.score))
        title = "why it won" if plan.ranked else "why it would win (provider not configured)"
        t = Table(title=f"{title}: {win.offer.label}", title_justify="left")
        t.add_column("dimension")
        t.add_column("weight", justify="right")
        t.add_column("winner", justify="right")
        if runner:
            t.add_column(f"#2 {runner.offer.provider}/{runner.offer.instance_type}", justify="right")
        if cheapest is not win and cheapest is not runner:
            t.add_column(f"lowest $/h {cheapest.offer.provider}/{cheapest.offer.instance_type}", justify="right")
        weights = planner_settings()["weights"]

        def cells(key: str, fmt) -> list[str]:
            vals = [fmt(win, key)]
            if runner:
                vals.append(fmt(runner, key))
            if cheapest is not win and cheapest is not runner:
                vals.append(fmt(cheapest, key))
            return vals

        for dim, label in _DIM_LABELS.items():
            t.add_row(label, f"{weights.get(dim, 0):.0%}", *cells(dim, lambda r, k: f"{r.scores.get(k, 0):.2f}"))
        for extra in sorted(set(win.scores) - set(_DIM_LABELS)):
            t.add_row(extra + " (plugin)", "", *cells(extra, lambda r, k: f"{r.scores.get(k, 0):.2f}"))
        t.add_row("[bold]score[/]", "100%", *cells("", lambda r, k: f"[bold]{r.score:.2f}[/]"))
        t.add_row("$/h", "", *cells("", lambda r, k: _money(r.offer.price)))
        t.add_row("boot + pre-warm", "", *cells("", lambda r, k: _hours(
            (r.breakdown.get("boot_s", 0) + r.breakdown.get("prewarm_s", 0)) / 3600)))
        t.add_row("training", "", *cells("", lambda r, k: _hours(r.breakdown.get("train_s", 0) / 3600)))
        t.add_row("egress", "", *cells("", lambda r, k: _money(r.breakdown.get("egress_usd", 0))))
        t.add_row(f"disk ({need.disk_gb} GB)", "", *cells("", lambda r, k: _money(r.breakdown.get("disk_usd", 0))))
        t.add_row("[bold]est. time[/]", "", *cells("", lambda r, k: _hours(r.est_hours)))
        t.add_row("[bold]est. cost[/]", "", *cells("", lambda r, k: _money(r.est_cost)))
        if need.autostop_action == "stop":
            t.add_row("stopped, per day", "", *cells("", lambda r, k: _per_day(r.breakdown.get("stopped_usd_per_day"))))
        con.print(t)
        b = win.breakdown
        con.print(f"Ranked by {plan.minimize}"
                  + (" (offers within a few % of each other ordered by score)" if plan.minimize != "score" else "")
                  + f". Work: {b.get('tokens', 0) / 1e6:.1f}M tokens ({need.tokens_source}); "
                  f"{b.get('tflops_per_gpu', 0):g} peak TFLOPs per GPU at {b.get('mfu', 0):.0%} MFU"
                  + ("" if b.get("flash_attention") else ", no FlashAttention-2") + ".")
    gpus = need.gpu.count_min if need.gpu else 1
    con.print(f"Host need per node ({gpus} GPU{'s' if gpus > 1 else ''}): {need.host_ram_for(gpus):.1f} GB RAM "
              f"({need.host_why}), {need.host_cpus_for(gpus)} vCPUs; the cheapest host shape that has both is taken.")
    if need.disk_gb:
        con.print(f"Disk per node: {need.disk_gb} GB ({need.disk_why}); it bills at the provider's $/GB-month while "
                  "the machine runs and while it is stopped.")
    if need.memory is not None:
        m = need.memory
        world = (need.gpu.count_min if need.gpu else 1) * need.nodes
        shape = m.shape
        con.print(f"VRAM estimate ({need.adapter} on {shape.params / 1e9:.2f}B params, optimizer {m.optimizer}"
                  f"{', ZeRO-' + str(m.setup.zero_stage) if m.setup.zero_stage else ''}"
                  f"{f', per GPU of {world}' if world > 1 else ''}; shape from {shape.source or shape.name}):",
                  markup=False)
        for line in m.explain(world):
            con.print(f"  {line}", markup=False, overflow="fold")
        con.print(f"  = {m.peak_allocated_gb(world):.1f} GB allocated at the peak, +{m.overhead:.0%} allocator "
                  f"+ {m.context_gb:g} GB CUDA context = {need.vram_gb:.1f} GB per GPU", markup=False)
    summary = rejection_summary(plan, 12)
    if summary:
        t = Table(title=f"most common rejection reasons ({len(plan.rejected)} offers rejected)", title_justify="left")
        t.add_column("offers", justify="right")
        t.add_column("reason")
        for reason, count in summary:
            t.add_row(str(count), reason)
        con.print(t)


@click.command("plan")
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--explain", is_flag=True, help="Show why the winner won and the most common rejection reasons.")
@json_option
@click.option("--minimize", type=click.Choice(["cost", "time", "score"]), default="cost", show_default=True,
              help="Rank by estimated end-to-end cost, time, or the seven-dimension score.")
@click.option("--top", type=click.IntRange(min=1), default=None, help="Offers to show (default: 10 in tables, all in --json).")
@click.option("--provider", "provider", metavar="NAME", default=None, help="Consider only this provider.")
def plan(recipe: str, explain: bool, as_json: bool, minimize: str, top: int | None, provider: str | None) -> None:
    """Rank the offers that can run RECIPE: VRAM need, est. time and cost, and why others were rejected.

    Exit codes: 0 when a configured provider can run RECIPE; 1 when none can (the table still shows what
    providers you have not configured could do, and why the rest were rejected); 2 for a bad recipe or option.
    """
    from ..planner import plan as make_plan
    from ..planner import plan_to_json, rejection_summary
    from ..plugins import configured_providers
    from ..recipe import load_recipe
    from ._common import print_recipe_notes
    from .catalog_cmd import catalog_note

    r = load_recipe(recipe)
    if not as_json:
        print_recipe_notes(r)
    usable, unavailable = configured_providers()
    p = make_plan(r, usable, unavailable, minimize=minimize, only_providers=(provider,) if provider else None)
    if as_json:
        data = plan_to_json(p)
        if top is not None:
            data["offers"] = data["offers"][:top]
            data["unconfigured"] = data["unconfigured"][:top]
        data["recipe"] = recipe
        data["catalog"] = catalog_note((provider,) if provider else None, as_json)
        emit_json(data)
        if not p.ranked:
            raise click.exceptions.Exit(1)
        return
    top = top or 10
    con = console()
    con.print(_need_line(p.need))
    for note in p.notes:
        con.print(f"[yellow]note:[/] {note}")
    if p.ranked:
        con.print(_offers_table(f"offers for {r.name} ({len(p.ranked)} feasible, best first by {minimize})",
                                list(p.ranked[:top])))
        if line := _stopped_line(p.need, p.ranked[0]):
            con.print(line)
    else:
        con.print("[red]No configured provider can run this recipe.[/] " + (
            "Configure one of the providers below (`launchpad check` shows why each is unavailable)."
            if p.unconfigured else "Loosen resources (gpu, regions, max_price, spot) or use a smaller adapter."))
    if p.unconfigured:
        best_conf = p.ranked[0].est_cost if p.ranked else None
        rows = [u for u in p.unconfigured if best_conf is None or u.est_cost < best_conf][: min(top, 5)]
        if rows:
            con.print(_offers_table("also possible with a provider you have not configured", rows))
            if not p.ranked and (line := _stopped_line(p.need, rows[0])):
                con.print(line)
            for name in sorted({u.offer.provider for u in rows}):
                why = unavailable.get(name) or f"no launchpad-{name} plugin installed"
                con.print(f"  [dim]{name}: not configured ({why})[/]")
    if explain:
        _explain(p, con)
    elif p.rejected:
        top_reasons = ", ".join(f"{reason} ({n})" for reason, n in rejection_summary(p, 3))
        con.print(f"[dim]{len(p.rejected)} offers rejected; most common: {top_reasons}. --explain for more.[/]")
    catalog_note((provider,) if provider else None, as_json)
    if not p.ranked:  # nothing can run it here: scripts (`plan && up`) must not go on
        raise click.exceptions.Exit(1)


@click.command("offers")
@click.option("--gpu", "gpu", metavar="SPEC", default=None,
              help="GPU spec in dstack's style (A100:1, H100:80GB:8, 24GB..) or SkyPilot's names (A100-80GB:1).")
@click.option("--spot", is_flag=True, help="Spot/preemptible offers (those with a known spot price).")
@click.option("--region", "regions", metavar="GLOB", multiple=True, help="Region or zone glob; repeatable.")
@click.option("--provider", "provider", metavar="NAME", default=None, help="Only this provider.")
@click.option("--max-price", type=click.FloatRange(min=0, min_open=True), default=None, help="USD per hour cap.")
@click.option("--limit", type=click.IntRange(min=1), default=30, show_default=True, help="Rows to show (not --json).")
@json_option
def offers(gpu: str | None, spot: bool, regions: tuple[str, ...], provider: str | None, max_price: float | None,
           limit: int, as_json: bool) -> None:
    """What the market has, cheapest first, configured provider or not (like `dstack offer`)."""
    from ..planner import offer_json
    from ..planner.market import market, parse_wanted_gpu
    from ..plugins import configured_providers
    from .catalog_cmd import catalog_note

    spec = parse_wanted_gpu(gpu) if gpu else None  # bad or unknown names: exit 2 before any provider is asked
    usable, _ = configured_providers()
    rows = market(spec, spot=spot, regions=regions, providers=usable, only_providers=(provider,) if provider else (),
                  max_price=max_price)
    if as_json:
        emit_json({"gpu": gpu, "spot": spot, "regions": list(regions), "offers": [offer_json(m.offer, m.configured)
                                                                                for m in rows],
                   "catalog": catalog_note((provider,) if provider else None, as_json)})
        return
    title = (f"{len(rows)} offers" + (f" for {spec}" if spec else "") + (" (spot)" if spot else "")
             + (f", showing the cheapest {limit}" if len(rows) > limit else ""))
    console().print(_market_table(title, rows[:limit]))
    catalog_note((provider,) if provider else None, as_json)

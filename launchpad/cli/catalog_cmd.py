"""`launchpad catalog refresh [PROVIDER...]` (current offers through gpuhunt, launchpad.planner.refresh) and
`launchpad catalog show` (where each provider's offers come from); `catalog_note` is the age line that
`plan` and `offers` print. Module import stays light (click only)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import Any

import click

from ._common import console, emit_json, err_console, esc, json_option

STALE_S = 7 * 86400  # a refreshed catalog older than this gets the refresh hint again


@click.group("catalog")
def catalog() -> None:
    """The offers the planner ranks: the bundled snapshot, or what `catalog refresh` fetched with gpuhunt."""


@catalog.command("refresh")
@click.argument("providers", nargs=-1, metavar="[PROVIDER...]")
@click.option("--source", type=click.Choice(["auto", "live", "published"]), default="auto", show_default=True,
              help="published: the catalog dstack collects and publishes (aws, azure, gcp, lambda, runpod; no "
                   "account needed; GPUHUNT_CATALOG_URL / GPUHUNT_CATALOG_DIR point it elsewhere). live: the "
                   "provider's API now (vast, runpod; lambda with LAMBDA_API_KEY). auto: published where it exists.")
@json_option
def refresh_cmd(providers: tuple[str, ...], source: str, as_json: bool) -> None:
    """Fetch current offers with gpuhunt for PROVIDERs (default: every one it covers) and write them where
    `plan` and `offers` read them. Exit 0 when all were written (skipped ones say why), 1 when one failed
    (the others are still written) or none was written, 2 for an unknown provider."""
    from ..planner.catalog import refreshed_dir
    from ..planner.refresh import Outcome, refresh, resolve_providers

    names = resolve_providers(providers)  # unknown names: exit 2 before anything is fetched
    if as_json:
        outcomes = refresh(names, source)
    else:
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        # The spinners live on stderr, each provider's result line goes to stdout; stdout is captured into
        # the live display only when it is the same terminal (a pipe gets the lines as they are).
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=err_console(),
                      transient=True, redirect_stdout=sys.stdout.isatty()) as progress:
            tasks = {n: progress.add_task(f"{n}: waiting", total=1) for n in names}

            def started(name: str, how: str) -> None:
                progress.update(tasks[name], description=f"{name}: fetching ({how})")

            def done(o: Outcome) -> None:
                progress.update(tasks[o.provider], completed=1, visible=False)
                console().print(_outcome_line(o), soft_wrap=True)

            outcomes = refresh(names, source, on_start=started, on_done=done)
    failed = [o.provider for o in outcomes if o.status == "failed"]
    written = [o.provider for o in outcomes if o.status == "written"]
    if as_json:
        emit_json({"folder": str(refreshed_dir()), "source": source, "providers": [o.to_dict() for o in outcomes]})
    elif written:
        console().print(f"[dim]{len(written)} catalog(s) in {esc(refreshed_dir())}; `launchpad plan` and "
                        "`launchpad offers` use them now[/]", soft_wrap=True)
    if failed or not written:
        if not as_json:
            why = f" failed for {', '.join(failed)}" if failed else ": nothing was written"
            err_console().print(f"[red]catalog refresh{why}[/]" + (" (the others were written)" if written else ""),
                                soft_wrap=True)
        raise click.exceptions.Exit(1)


def _outcome_line(o: Any) -> str:
    if o.status == "written":
        dropped = sum(o.dropped.values())
        extra = f", {dropped} left out ({', '.join(f'{k} {v}' for k, v in sorted(o.dropped.items()))})" if dropped else ""
        offers = f"{o.rows} offer{'' if o.rows == 1 else 's'}"
        return f"[green]✓[/] {esc(o.provider)}: {offers} from {esc(o.detail)} in {o.seconds:.1f} s{extra}"
    if o.status == "skipped":
        return f"[yellow]-[/] {esc(o.provider)}: skipped: {esc(o.detail)}"
    return f"[red]✗[/] {esc(o.provider)}: {esc(o.source)} fetch failed: {esc(o.detail)}"


@catalog.command("show")
@json_option
def show_cmd(as_json: bool) -> None:
    """Each provider's catalog: the bundled snapshot (and its date) or refreshed (and when), with its offers."""
    from ..planner.catalog import catalog_sources
    from ..planner.refresh import GPUHUNT_NAMES

    now = time.time()
    sources = catalog_sources()
    missing = sorted(set(GPUHUNT_NAMES) - set(sources))
    if as_json:
        emit_json({"providers": {p: s.to_dict(now) for p, s in sources.items()},
                   "not_fetched": missing})
        return
    from ._tables import Col, fit_table

    cols = [Col("provider", priority=9), Col("offers", "right", 8, whole=True), Col("catalog", priority=7),
            Col("from", priority=3)]
    rows = [[esc(p), str(s.rows), esc(s.label(now) if s.kind != "none" else "none"), esc(s.via)]
            for p, s in sources.items()]
    rows += [[esc(p), "0", "[dim]none[/]", f"[dim]`launchpad catalog refresh {esc(p)}`[/]"] for p in missing]
    table = fit_table("catalog", cols, rows, console().width)
    console().print(table)
    _print_warnings(sources.values())


def _print_warnings(sources: Iterable[Any]) -> None:
    for s in sources:
        if s.warning:
            err_console().print(f"[yellow]![/] catalog: {esc(s.warning)}", soft_wrap=True)


def catalog_note(providers: Iterable[str] | None, as_json: bool) -> dict[str, Any]:
    """For `plan` and `offers`: print on stderr how old the catalog they used is (one dim line, grouped, e.g. "catalog:
    refreshed 3 h ago (lambda, vast); bundled snapshot of 2026-05-20 (gcp)") and any unusable refreshed file
    on stderr; return the per-provider records for --json."""
    from ..planner.catalog import catalog_sources

    now = time.time()
    sources = catalog_sources(providers)
    _print_warnings(sources.values())
    if not as_json and sources:
        groups: dict[str, list[str]] = {}
        for p, s in sources.items():
            groups.setdefault(s.label(now) if s.kind != "none" else "no catalog", []).append(p)
        line = "; ".join(f"{label} ({', '.join(names)})" for label, names in groups.items())
        old = any(s.kind != "refreshed" or (s.age_s(now) or 0) > STALE_S for s in sources.values())
        hint = "; `launchpad catalog refresh` fetches current offers" if old else ""
        # stderr, as a notice: stdout keeps exactly the tables (scripts, `| head`, fixed-height layouts)
        err_console().print(f"[dim]catalog: {esc(line)}{hint}[/]")
    return {p: s.to_dict(now) for p, s in sources.items()}

"""The `launchpad` command: thin. It parses, calls the core, and renders (rich tables, progress bars,
`--json`). Exit codes: 0 ok, 1 job/provider failure, 2 bad input, 130 interrupted. `LaunchpadError`
is caught once, in `main`, and printed without a traceback.

Heavy modules (rich, pydantic, the lifecycle, providers) are imported inside commands: `launchpad
--help` must start fast and `import launchpad.cli` must not pull in torch or any cloud SDK.
"""

from __future__ import annotations

import sys

import click

from ._common import console, emit_json, err_console, esc, json_option

EPILOG = "Docs: README.md. Exit codes: 0 ok, 1 job or provider failure, 2 bad input."


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="launchpad", prog_name="launchpad")
def cli() -> None:
    """Fine-tune LLMs on whichever GPU provider fits the job, survive interruptions, stop billing when done."""


def _load(path: str, overrides: dict | None = None, *, notes: bool = True):
    from ..recipe import load_recipe
    from ._common import print_recipe_notes

    recipe = load_recipe(path, overrides=overrides) if overrides else load_recipe(path)
    if notes:
        print_recipe_notes(recipe)
    return recipe


@cli.command()
@click.argument("recipe", type=click.Path(dir_okay=True))
@json_option
def validate(recipe: str, as_json: bool) -> None:
    """Check a recipe: exit 0, or exit 2 with one line per problem (--json: the problems as records)."""
    from ..errors import RecipeError

    try:
        r = _load(recipe, notes=not as_json)
    except RecipeError as e:
        if not as_json:
            raise  # main() prints one line per problem on stderr
        from ._problems import problem_records

        emit_json({"recipe": recipe, "valid": False, "problems": problem_records(e.problems, recipe)})
        raise click.exceptions.Exit(e.exit_code) from None
    if as_json:
        emit_json({"recipe": recipe, "valid": True, "name": r.name, "adapter": r.adapter, "notes": r.notes})
    else:
        console().print(f"[green]✓[/] {esc(recipe)}: valid ({esc(r.name)}, adapter {esc(r.adapter)})")


@cli.command()
def schema() -> None:
    """Print the JSON Schema of recipes (for editors: yaml-language-server)."""
    from ..recipe import recipe_schema

    emit_json(recipe_schema())


@cli.command()
@json_option
def check(as_json: bool) -> None:
    """Installed provider plugins: usable here, or why not (like `sky check`)."""
    from ..plugins import configured_providers, get_provider_classes, plugin_names

    usable, unavailable = configured_providers()
    dists = {name: dist for name, dist in plugin_names()}
    rows = []
    for name in sorted(get_provider_classes()):
        detail = None
        if name in usable:
            try:
                detail = usable[name].describe()
            except Exception as e:  # a detail never turns a usable provider into an error
                detail = f"(details unavailable: {e})"
        rows.append({"provider": name, "usable": name in usable, "reason": unavailable.get(name),
                     "detail": detail, "plugin": dists.get(name, "")})
    if as_json:
        emit_json({"providers": rows})
        return
    from rich.table import Table

    table = Table(title="providers", title_justify="left")
    for col in ("provider", "usable here", "plugin"):
        table.add_column(col)
    for row in rows:
        mark = (f"[green]✓ yes[/]{': ' + esc(row['detail']) if row['detail'] else ''}" if row["usable"]
                else f"[red]✗[/] {esc(row['reason'])}")
        table.add_row(esc(row["provider"]), mark, esc(row["plugin"]))
    console().print(table)
    if not usable:
        raise click.exceptions.Exit(1)


def _recovery_flags(fn):
    """`--recover`, `--max-restarts`, `--strategy` (launchpad.recovery), checked by hand: one line, exit 2."""
    fn = click.option("--strategy", default=None, metavar="same-region|next-region|anywhere",
                      help="Where a recovery may go: the lost instance's region only, any other region, or any "
                           "offer but the reclaimed one (default). Implies --recover.")(fn)
    fn = click.option("--max-restarts", type=int, default=None, metavar="N",
                      help="Recoveries allowed (default 3). Implies --recover.")(fn)
    return click.option("--recover", is_flag=True,
                        help="Keep watching after training starts; when the instance is preempted or vanishes, "
                             "re-plan and resume from the newest checkpoint (`launchpad watch` does it for --detach).")(fn)


@cli.command()
@click.argument("recipe", type=click.Path(dir_okay=True))
@click.option("--provider", default=None, help="Only consider this provider (same as resources.providers: [NAME]).")
@click.option("--detach", "-d", is_flag=True, help="Return once training has started; follow with `status`/`logs`.")
@click.option("--smoke", is_flag=True, help="Run 10 steps end to end before committing to a long run.")
@click.option("--minimize", type=click.Choice(["cost", "time", "score"]), default="cost", show_default=True)
@click.option("--strict", is_flag=True,
              help="Multi-node: fail before training (nothing left running) when the preflight's all-reduce "
                   "measures under 60% of the bandwidth the interconnect promises, instead of warning.")
@click.option("--dry-run", is_flag=True,
              help="Plan, then print what the best offer's provider would create (e.g. Kubernetes manifests) and stop.")
@_recovery_flags
@json_option
def up(recipe: str, provider: str | None, detach: bool, smoke: bool, minimize: str, strict: bool, recover: bool,
       max_restarts: int | None, strategy: str | None, as_json: bool, dry_run: bool = False) -> None:
    """Plan, provision, sync, train and checkpoint a recipe; tear down when done."""
    from pathlib import Path

    from ..recovery import recovery_options
    from ..state import JobOptions
    from ._run import open_lifecycle, run_reported

    options = recovery_options(JobOptions(), recover, max_restarts, strategy)  # bad input before anything else
    r = _load(recipe)  # validation first: a bad recipe never reaches a provider
    text = Path(recipe).read_text(encoding="utf-8")
    lc = open_lifecycle(as_json, only=None)
    if dry_run:
        return _dry_run(lc, r, provider, minimize, as_json)
    lc.strict = strict
    job_id = lc.submit(r, text, provider=provider, max_steps=10 if smoke else None, minimize=minimize, options=options)
    if not as_json:
        console().print(f"[bold]job[/] {esc(job_id)}")
    job = run_reported(lc, as_json, lambda: lc.run(job_id, detach=detach))
    _print_outcome(job, as_json, detach)


def _dry_run(lc, r, provider: str | None, minimize: str, as_json: bool) -> None:
    """`up --dry-run`: the plan's best offer and what its provider would create there (Provider.render)."""
    from ..lifecycle import new_job_id
    from ..models import JOB_TAG, InstanceSpec, TeardownMode

    planned = lc.plan(r, provider=provider, minimize=minimize)
    offer = planned.ranked[0].offer
    job_id = new_job_id(r.name)
    spec = InstanceSpec(job_id=job_id, token=f"{job_id}-dryrun", tags={JOB_TAG: job_id}, nodes=r.resources.nodes,
                        disk=r.resources.disk, autostop_idle_minutes=r.autostop.idle_minutes,
                        autostop_action=TeardownMode(r.autostop.action), disk_gb=planned.need.disk_gb)
    text = lc.provider(offer.provider).render(offer, spec)
    if as_json:
        emit_json({"offer": offer.to_dict(), "provider": offer.provider, "render": text})
    elif text is None:
        err_console().print(f"{esc(offer.label)}: the {esc(offer.provider)} provider has nothing to show before it runs")
    else:
        err_console().print(f"# dry run: {esc(offer.label)}; nothing was created")
        click.echo(text, nl=not text.endswith("\n"))


@cli.command()
@click.argument("job", required=False)
@click.option("--from", "from_uri", default=None, metavar="URI",
              help="Resume the job in this store folder (s3://, gs://, az://, file://.../JOB) from any machine: "
                   "its job.json is imported into the local state first.")
@click.option("--same-offer", is_flag=True, help="With --from: provision on the offer the job last ran on, or fail.")
@click.option("--detach", "-d", is_flag=True, help="Return once training has restarted.")
@click.option("--strict", is_flag=True,
              help="Multi-node: fail before training (nothing left running) when the preflight's all-reduce "
                   "measures under 60% of the bandwidth the interconnect promises, instead of warning.")
@_recovery_flags
@json_option
def resume(job: str | None, from_uri: str | None, same_offer: bool, detach: bool, strict: bool, recover: bool,
           max_restarts: int | None, strategy: str | None, as_json: bool) -> None:
    """Continue a job after a preemption, a crash or Ctrl-C, from its newest complete checkpoint."""
    from ..errors import BadInput
    from ..recovery import check_recovery_options, recovery_options
    from ._run import open_lifecycle, run_reported

    check_recovery_options(max_restarts, strategy)
    if bool(job) == bool(from_uri):
        raise BadInput("resume: give a JOB (known here) or --from URI (its store folder), not both or neither; "
                       "e.g. `launchpad resume --from s3://bucket/checkpoints/JOB`")
    if same_offer and not from_uri:
        raise BadInput("--same-offer: only with --from URI; drop --same-offer, or give the job's folder with --from")
    lc = open_lifecycle(as_json)
    lc.strict = strict
    job_id = lc.import_from(from_uri) if from_uri else lc.db.job(job or "").id
    if same_offer:
        lc.only_offer = lc.recorded_offer(job_id)
        if not lc.only_offer:
            raise BadInput(f"--same-offer: {job_id} has no recorded offer (it never provisioned); drop --same-offer")
    if recover or max_restarts is not None or strategy is not None:
        lc.arm_recovery(job_id, recovery_options(lc.options(job_id), recover, max_restarts, strategy))
    result = run_reported(lc, as_json, lambda: lc.resume(job_id, detach=detach))
    _print_outcome(result, as_json, detach)


def _print_outcome(job, as_json: bool, detach: bool) -> None:
    if as_json:
        emit_json(job.to_json())
        return
    state = job.state.value
    if detach and state == "TRAINING":
        console().print(f"[green]✓[/] {esc(job.id)} is training; follow it with `launchpad logs {esc(job.id)} -f`")
    elif state == "SUCCEEDED":
        console().print(f"[green]✓[/] {esc(job.id)} succeeded at step {job.step}; checkpoint {esc(job.last_checkpoint)}")
    else:
        console().print(f"{esc(job.id)}: {esc(state)}")


@cli.command()
@click.argument("job", required=False)
@click.option("--all", "all_", is_flag=True,
              help="Every job; by default the live ones and the 10 newest finished.")
@click.option("--watch", "-w", is_flag=True, help="Refresh in place until the job (or every shown job) has ended.")
@click.option("--interval", type=float, default=2.0, show_default=True, metavar="SECONDS",
              help="--watch: seconds between refreshes.")
@json_option
def status(job: str | None, all_: bool, watch: bool, interval: float, as_json: bool) -> None:
    """Jobs with phase, step/total, loss, last checkpoint and cost so far (instance time + disk). For one
    JOB also its loss curve, eval loss, speed, ETA, projected cost against the plan, and the newest
    checkpoint complete in its store."""
    import json
    import time
    from typing import Any

    from ..errors import BadInput
    from ..lifecycle import Lifecycle
    from ..models import JobState
    from ..plugins import provider_for
    from ..state import StateDB
    from ._progress_view import from_store
    from ._run import RichReporter, _QuietReporter, print_warnings
    from ._views import STATUS_LATEST, job_view, jobs_view

    if interval <= 0:
        raise BadInput(f"--interval {interval:g}: must be more than 0 seconds; e.g. --interval 2")
    db = StateDB.open()
    # No provider is checked up front (open_lifecycle checks every installed one: AWS alone costs 0.3 s
    # and may reach the network): a live job's provider is built when its row needs it, as provider_for
    # builds it for any job that already ran there.
    lc = Lifecycle(db, {}, {}, _QuietReporter() if as_json else RichReporter(), provider_factory=provider_for)
    warned: set[str] = set()

    def warn(job_id: str, e: Exception) -> None:
        if job_id not in warned:  # once, not at every refresh of --watch
            warned.add(job_id)
            err_console().print(f"[yellow]![/] {esc(job_id)}: cannot refresh: {esc(e)}", soft_wrap=True)

    if watch and not job and not as_json:
        # `up --detach && status --watch`: one job is live, so watch it as `status JOB --watch` does, its curve
        # filling in (the table has no room for it at 80 columns); --json keeps the rows of every job
        live_jobs = [j for j in db.jobs(live_or_latest=0) if not j.state.finished]
        if len(live_jobs) == 1:
            job = live_jobs[0].id
            err_console().print(f"watching {esc(job)}, the only live job", style="dim", soft_wrap=True)
    latest = None if (all_ or job) else STATUS_LATEST

    # the store is read again only when the job's last checkpoint (or whether a live curve exists) changed
    store_key: list[tuple] = []
    store_found: dict[str, Any] = {}

    def snapshot() -> tuple[list[dict], int]:
        rows = lc.status_rows(job, on_error=warn, latest=latest)  # with cost_usd and disk_usd
        if job:
            key = (rows[0].get("last_checkpoint"), bool(rows[0].get("losses")))
            if store_key != [key]:
                store_key[:] = [key]
                store_found.clear()
                store_found.update(from_store(rows[0], lc.db.job(rows[0]["id"]).spec.checkpoint_uri))
            rows[0].update(store_found)
        return rows, (lc.db.count_jobs() - len(rows) if latest is not None else 0)

    def view(rows: list[dict], hidden: int):
        from rich.console import Group
        from rich.text import Text

        width = console().width
        body = job_view(rows[0], list(lc.db.events(rows[0]["id"])), width) if job else jobs_view(rows, width)
        return Group(body, Text(f"{hidden} older jobs hidden: `launchpad status --all`", style="dim")) if hidden > 0 else body

    def ended(rows: list[dict]) -> bool:
        return all(JobState(r["state"]).finished for r in rows)

    rows, hidden = snapshot()
    print_warnings(lc.db)  # damaged rows are skipped, and said so
    footer = f"{hidden} older jobs hidden: `launchpad status --all`"
    if as_json:
        if not watch:
            emit_json(rows)
        else:  # one JSON document per line and refresh (NDJSON), the last once every job has ended
            while True:
                sys.stdout.write(json.dumps(rows, default=str) + "\n")
                sys.stdout.flush()
                if ended(rows):
                    break
                time.sleep(interval)
                rows, hidden = snapshot()
        if hidden > 0:  # stdout stays JSON
            err_console().print(footer, markup=False, soft_wrap=True)
        return
    if not watch:
        console().print(view(rows, hidden))
        return
    from rich.live import Live

    with Live(view(rows, hidden), console=console(), refresh_per_second=4, auto_refresh=False) as live:
        while not ended(rows):
            time.sleep(interval)
            rows, hidden = snapshot()
            live.update(view(rows, hidden), refresh=True)


@cli.command()
@click.argument("job")
@click.option("--follow", "-f", is_flag=True, help="Keep streaming until the trainer exits.")
@json_option
def logs(job: str, follow: bool, as_json: bool) -> None:
    """The trainer's log."""
    import json

    from ._run import open_lifecycle

    lc = open_lifecycle(as_json)
    for line in lc.logs(job, follow=follow):
        sys.stdout.write((json.dumps({"line": line}) if as_json else line) + "\n")
        sys.stdout.flush()


@cli.command()
@click.argument("job", required=False)
@click.option("--all", "all_", is_flag=True, help="Every instance launchpad started or can find by its tag.")
@json_option
def down(job: str | None, all_: bool, as_json: bool) -> None:
    """Tear down a job's instances (idempotent: already gone is fine)."""
    from ..errors import BadInput, StateError, TeardownIncomplete
    from ._run import open_lifecycle, print_warnings

    if bool(job) == all_:
        raise BadInput("give a JOB or --all")
    try:
        lc = open_lifecycle(as_json)
    except StateError as e:
        if not all_:
            raise
        gone = _down_all_without_state(e, as_json)
    else:
        try:
            gone = lc.down_all() if all_ else lc.down(job)
        except TeardownIncomplete as e:
            _print_down(e.gone, as_json, left=e.left)
            raise
        print_warnings(lc.db)  # damaged rows: their instances were still found by tag
    _print_down(gone, as_json)


def _down_all_without_state(error: Exception, as_json: bool) -> list[str]:
    """Teardown never depends on the state DB: find every instance by its tag instead."""
    from ..plugins import configured_providers
    from ..settings import state_url
    from ..teardown import down_all_by_tag

    path = state_url().removeprefix("sqlite:///")
    err_console().print(f"[yellow]![/] {esc(error)}; finding instances by their tag instead. The database was "
                        f"left as it is: move it aside (mv {esc(path)} {esc(path)}.broken) to start afresh",
                        soft_wrap=True)
    usable, _ = configured_providers()
    return down_all_by_tag(usable)


def _print_down(gone: list[str], as_json: bool, left: list[str] | None = None) -> None:
    if as_json:
        emit_json({"terminated": gone, "left": left or []})
    elif gone:
        console().print(f"[green]✓[/] terminated {esc(', '.join(gone))}")
    elif not left:
        console().print("nothing to tear down: no live instances")


def _add_optional_commands() -> None:
    try:
        from .plan_cmds import offers, plan
    except ImportError:  # planner CLI not built yet
        return
    cli.add_command(plan)
    cli.add_command(offers)
    from .export_cmd import export
    from .reap_cmd import reap

    cli.add_command(export)
    cli.add_command(reap)
    from .watch_cmd import watch

    cli.add_command(watch)
    from .catalog_cmd import catalog

    cli.add_command(catalog)
    from .dashboard_cmd import dashboard

    cli.add_command(dashboard)
    from .convert_cmd import convert

    cli.add_command(convert)


_add_optional_commands()


def main(argv: list[str] | None = None) -> None:
    from ..errors import JobFailed, LaunchpadError, RecipeError

    try:
        rv = cli.main(args=argv, prog_name="launchpad", standalone_mode=False)
    except LaunchpadError as e:
        if isinstance(e, RecipeError):
            for line in e.problems:
                err_console().print(line, markup=False, soft_wrap=True)
        else:
            err_console().print(f"[red]error:[/] {esc(e)}", soft_wrap=True)
        if isinstance(e, JobFailed) and e.log_tail:
            err_console().print("[dim]last log lines:[/]")
            for line in e.log_tail[-15:]:
                err_console().print(f"  {line}", markup=False, style="dim", soft_wrap=True)
        sys.exit(e.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):  # click turns Ctrl-C into Abort
        err_console().print("interrupted: the job was stopped and can be resumed with `launchpad resume JOB`")
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    sys.exit(rv if isinstance(rv, int) else 0)

"""`launchpad reap`: one pass (or one every --every) of the idle/orphan policy over every configured
provider's launchpad-tagged instances (launchpad.reaper), and the schedules that run it unattended
(launchpad.reap_units)."""

from __future__ import annotations

import time

import click

from ._common import console, emit_json, err_console, esc, json_option

_COLOURS = {"active": "green", "starting": "cyan", "idle": "yellow", "finished": "blue", "orphan": "red",
            "over-age": "magenta", "stopped": "dim"}


@click.command("reap")
@click.option("--dry-run", is_flag=True, help="Only print what would be done.")
@click.option("--grace", default="15m", show_default=True,
              help="Never remove an instance younger than this on missing evidence alone (no job record, no heartbeat).")
@click.option("--max-age", default=None, help="Terminate instances older than this (e.g. 24h), saving a checkpoint first.")
@click.option("--force", is_flag=True, help="--max-age: terminate even when no checkpoint could be saved first.")
@click.option("--checkpoint-timeout", default="5m", show_default=True, help="How long an over-age trainer gets to save.")
@click.option("--every", default=None, help="Run a pass every INTERVAL (e.g. 10m) in the foreground until Ctrl-C; "
                                            "with --print-*: the schedule (default 10m).")
@click.option("--print-cron", "print_what", flag_value="cron", help="Print a crontab line that runs reap --every.")
@click.option("--print-systemd", "print_what", flag_value="systemd", help="Print a systemd user service and timer.")
@click.option("--print-k8s-cronjob", "print_what", flag_value="k8s", help="Print a Kubernetes CronJob (batch/v1).")
@click.option("--image", default="launchpad:latest", show_default=True,
              help="--print-k8s-cronjob: the image (launchpad and its provider packages installed).")
@click.option("--secret", default="launchpad-state", show_default=True,
              help="--print-k8s-cronjob: the Secret whose key LAUNCHPAD_STATE_URL points at the state DB.")
@json_option
def reap(dry_run: bool, grace: str, max_age: str | None, force: bool, checkpoint_timeout: str, every: str | None,
         print_what: str | None, image: str, secret: str, as_json: bool) -> None:
    """Stop or terminate idle, finished and orphaned instances, found by their launchpad tag on every provider."""
    from ..reap_units import parse_duration
    from ..reaper import ReapPolicy

    policy = ReapPolicy(grace=parse_duration(grace, "--grace"),
                        max_age=parse_duration(max_age, "--max-age") if max_age else None,
                        dry_run=dry_run, force=force,
                        checkpoint_timeout=parse_duration(checkpoint_timeout, "--checkpoint-timeout"))
    if print_what:
        args = [*(["--grace", grace] if grace != "15m" else []), *(["--max-age", max_age] if max_age else []),
                *(["--force"] if force else []), *(["--dry-run"] if dry_run else [])]
        _print_unit(print_what, args, parse_duration(every or "10m", "--every"), image, secret)
        return
    if every is None:
        report = _one_pass(policy, as_json)
        if report.failed or report.errors:
            raise click.exceptions.Exit(1)
        return
    interval = parse_duration(every, "--every")
    try:
        while True:
            try:
                _one_pass(policy, as_json)
            except Exception as e:  # a pass's trouble is printed; the loop goes on
                err_console().print(f"[red]reap pass failed:[/] {esc(e)}", soft_wrap=True)
            time.sleep(interval)
    except (KeyboardInterrupt, click.exceptions.Abort):
        err_console().print("reap: stopped")


def _print_unit(what: str, args: list[str], every: float, image: str, secret: str) -> None:
    from ..reap_units import crontab_line, k8s_cronjob, render_k8s, render_systemd, systemd_units

    if what == "cron":
        click.echo(crontab_line(args, every))
    elif what == "systemd":
        click.echo(render_systemd(systemd_units(args, every)), nl=False)
    else:
        click.echo(render_k8s(k8s_cronjob(args, every, image=image, secret=secret)), nl=False)


def _one_pass(policy, as_json: bool):
    from ..errors import LaunchpadError
    from ..lifecycle import Lifecycle
    from ..plugins import configured_providers
    from ..reaper import Reaper
    from ..settings import load_user_config
    from ..state import StateDB
    from ._run import print_warnings

    usable, unavailable = configured_providers()
    configured = set(load_user_config().get("providers") or {})
    for name, reason in sorted(unavailable.items()):
        if name in configured:
            err_console().print(f"[yellow]![/] {esc(name)}: not reaped here: {esc(reason)}", soft_wrap=True)
    db = lifecycle = None
    try:
        db = StateDB.open()
        print_warnings(db)
        lifecycle = Lifecycle(db, usable)
    except LaunchpadError as e:
        err_console().print(f"[yellow]![/] {esc(e)}: classifying from the stores alone", soft_wrap=True)
    try:
        report = Reaper(usable, db, policy, lifecycle=lifecycle).run()
    finally:
        if db is not None:
            db.close()
    if as_json:
        emit_json(report.to_json())
    else:
        _table(report)
    for error in report.errors:
        err_console().print(f"[red]error:[/] {esc(error)}", soft_wrap=True)
    for d in report.failed:
        err_console().print(f"[red]error:[/] {esc(d.instance.id)} ({esc(d.instance.provider)}) should go and is still up: "
                            f"{esc(d.result)}; run `launchpad reap` again once the cause is fixed", soft_wrap=True)
    return report


def _table(report) -> None:
    from rich.table import Table

    from ..reaper import human_duration

    title = f"launchpad reap{' --dry-run' if report.dry_run else ''}: {len(report.decisions)} instance(s) " \
            f"in {report.seconds:.1f}s"
    table = Table(title=title, title_justify="left")
    for col in ("instance", "provider", "region", "job", "class", "age", "heartbeat", "action", "result"):
        table.add_column(col, overflow="fold")
    for d in sorted(report.decisions, key=lambda d: (d.instance.provider, d.klass.value, d.instance.id)):
        colour = _COLOURS.get(d.klass.value, "white")
        result = d.result if d.ok else f"[red]{esc(d.result)}[/]"
        table.add_row(esc(d.instance.id), esc(d.instance.provider), esc(d.region or "-"), esc(d.instance.job_id or "-"),
                      f"[{colour}]{d.klass.value}[/]", human_duration(d.age), human_duration(d.heartbeat_age),
                      esc(d.action), result if not d.ok else esc(result))
    console().print(table)
    reasons = {d.instance.id: d.reason for d in report.decisions if d.action != "keep"}
    for iid, reason in reasons.items():
        console().print(f"  {esc(iid)}: {esc(reason)}", soft_wrap=True)


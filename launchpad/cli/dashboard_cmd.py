"""`launchpad dashboard`: the jobs and their runs on a local web page (launchpad.dashboard)."""

from __future__ import annotations

import json
import sys

import click

from ._common import console, esc, json_option


@click.command("dashboard")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Beyond loopback (e.g. 0.0.0.0) the URL carries a token the page needs.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port to listen on; 0 takes a free one.")
@click.option("--refresh", type=float, default=2.0, show_default=True, metavar="SECONDS",
              help="Seconds between the page's refreshes.")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in the default browser.")
@json_option
def dashboard(host: str, port: int, refresh: float, open_browser: bool, as_json: bool) -> None:
    """A web page with every job (state, provider, GPU, step, cost) and one job's loss curve, eval loss,
    speed, checkpoints, events and log tail, refreshing by itself. It reads the state and the stores and
    writes nothing. Ctrl-C stops it."""
    from ..dashboard import Binding, serve
    from ..errors import BadInput

    if refresh <= 0:
        raise BadInput(f"--refresh {refresh:g}: must be more than 0 seconds; e.g. --refresh 2")

    def ready(bound: Binding) -> None:
        if as_json:  # one line, so that a script can read the URL and go on
            sys.stdout.write(json.dumps({"url": bound.url, "host": bound.host, "port": bound.port}) + "\n")
            sys.stdout.flush()
        else:
            console().print(f"launchpad dashboard on [bold]{esc(bound.url)}[/] (Ctrl-C to stop)", soft_wrap=True)
            if bound.token:
                console().print("[yellow]![/] listening beyond loopback: anyone with this URL (its token) sees "
                                "your jobs and logs", soft_wrap=True)
        if open_browser:
            import webbrowser

            webbrowser.open(bound.url)

    try:
        serve(host, port, refresh_s=refresh, on_ready=ready)
    except KeyboardInterrupt:  # uvicorn stops cleanly on Ctrl-C, then raises it again
        if not as_json:
            console().print("dashboard stopped")

"""Ready-to-install schedules for `launchpad reap`: a crontab line, systemd user units (a oneshot service
and its timer), a Kubernetes CronJob (batch/v1). Printed by ``launchpad reap --print-cron |
--print-systemd | --print-k8s-cronjob``; nothing here installs anything.

What the scheduled command needs besides the binary is read where it runs: config.yaml (providers) and
the state DB under LAUNCHPAD_HOME (or the user's dirs), cloud credentials from the environment or the
SDKs' own files. Credentials are never written into a unit: LAUNCHPAD_STATE_URL (it may hold a
password) comes from a Kubernetes Secret, or an EnvironmentFile for systemd.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import BadInput

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
SERVICE = "launchpad-reap.service"
TIMER = "launchpad-reap.timer"


def parse_duration(text: str, what: str = "duration") -> float:
    """``90s``, ``10m``, ``24h``, ``2d`` (a bare number is seconds) -> seconds."""
    m = _DURATION.match(str(text))
    if not m or float(m.group(1)) <= 0:
        raise BadInput(f"{what} {text!r}: expected a positive duration like 30s, 10m, 24h or 2d")
    return float(m.group(1)) * _UNIT[m.group(2)]


def launchpad_argv() -> list[str]:
    """The absolute command that runs this launchpad: its console script, else ``python -m launchpad``."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name == "launchpad" and argv0.exists():
        return [str(argv0.resolve())]
    exe = shutil.which("launchpad", path=os.path.dirname(sys.executable)) or shutil.which("launchpad")
    if exe:
        return [os.path.abspath(exe)]
    return [os.path.abspath(sys.executable), "-m", "launchpad"]


def cron_schedule(every: float) -> str:
    """A cron schedule running every `every` seconds: whole minutes dividing an hour, hours dividing a day."""
    minutes = every / 60
    if minutes == int(minutes) and 1 <= minutes < 60 and 60 % int(minutes) == 0:
        return "* * * * *" if minutes == 1 else f"*/{int(minutes)} * * * *"
    hours = every / 3600
    if hours == int(hours) and 1 <= hours <= 24 and 24 % int(hours) == 0:
        return "0 * * * *" if hours == 1 else ("0 0 * * *" if hours == 24 else f"0 */{int(hours)} * * *")
    raise BadInput(f"--every {_human(every)}: cron can only run it evenly every 1-30 minutes dividing an hour "
                   "(1m, 5m, 10m, 15m, 20m, 30m) or hours dividing a day (1h, 2h, 3h, 4h, 6h, 8h, 12h, 24h)")


def _human(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _home_env() -> dict[str, str]:
    """Settings the scheduled command must share with this shell (never credentials)."""
    home = os.environ.get("LAUNCHPAD_HOME")
    return {"LAUNCHPAD_HOME": os.path.abspath(home)} if home else {}


def crontab_line(reap_args: Sequence[str], every: float) -> str:
    from .settings import data_dir

    log_path = data_dir() / "reap.log"
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in _home_env().items())
    command = shlex.join([*launchpad_argv(), "reap", *reap_args])
    line = f"{cron_schedule(every)} {env + ' ' if env else ''}{command} >> {shlex.quote(str(log_path))} 2>&1"
    return line.replace("%", "\\%")  # cron turns a bare % into a newline


def _systemd_quote(arg: str) -> str:
    arg = arg.replace("%", "%%").replace("$", "$$")
    if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", arg):
        return arg
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_units(reap_args: Sequence[str], every: float) -> dict[str, str]:
    """{file name: text} of a user service + timer (~/.config/systemd/user/)."""
    exec_start = " ".join(_systemd_quote(a) for a in [*launchpad_argv(), "reap", *reap_args])
    env = "".join(f"Environment={_systemd_quote(f'{k}={v}')}\n" for k, v in _home_env().items())
    interval = _human(every).replace("m", "min")
    service = (
        "[Unit]\n"
        "Description=launchpad reap: stop or terminate idle and orphaned launchpad instances\n"
        "Wants=network-online.target\nAfter=network-online.target\n\n"
        "[Service]\nType=oneshot\n"
        f"ExecStart={exec_start}\n{env}"
        "# credentials (e.g. LAUNCHPAD_STATE_URL, AWS_PROFILE) go in this file, never in the unit\n"
        "EnvironmentFile=-%h/.config/launchpad/reap.env\n"
        "TimeoutStartSec=1h\n"
    )
    timer = (
        "[Unit]\n"
        f"Description=Run launchpad reap every {_human(every)}\n\n"
        "[Timer]\n"
        "OnBootSec=5min\n"
        f"OnUnitActiveSec={interval}\n"
        "AccuracySec=1min\n"
        f"Unit={SERVICE}\n\n"
        "[Install]\nWantedBy=timers.target\n"
    )
    return {SERVICE: service, TIMER: timer}


def render_systemd(units: dict[str, str]) -> str:
    return "\n".join(f"# file: {name}\n{text}" for name, text in units.items())


def k8s_cronjob(reap_args: Sequence[str], every: float, *, image: str, secret: str = "launchpad-state",
                name: str = "launchpad-reap") -> dict[str, Any]:
    """A batch/v1 CronJob running ``launchpad reap`` in `image` (which has launchpad and its providers)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": name}},
        "spec": {
            "schedule": cron_schedule(every),
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 300,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {"spec": {
                "backoffLimit": 0,
                "activeDeadlineSeconds": 3600,
                "template": {
                    "metadata": {"labels": {"app.kubernetes.io/name": name}},
                    "spec": {
                        "restartPolicy": "Never",
                        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
                        "containers": [{
                            "name": "reap",
                            "image": image,
                            "command": ["launchpad", "reap", *reap_args],
                            "env": [
                                {"name": "LAUNCHPAD_STATE_URL",
                                 "valueFrom": {"secretKeyRef": {"name": secret, "key": "LAUNCHPAD_STATE_URL"}}},
                                {"name": "LAUNCHPAD_HOME", "value": "/var/lib/launchpad"},
                            ],
                            "volumeMounts": [
                                {"name": "home", "mountPath": "/var/lib/launchpad"},
                                {"name": "config", "mountPath": "/var/lib/launchpad/config.yaml", "subPath": "config.yaml"},
                            ],
                            # cloud credentials, if the pod has no workload identity: optional
                            "envFrom": [{"secretRef": {"name": f"{name}-credentials", "optional": True}}],
                            "resources": {"requests": {"cpu": "100m", "memory": "256Mi"},
                                          "limits": {"memory": "1Gi"}},
                        }],
                        # config.yaml (the providers' settings) from a ConfigMap: kubectl create configmap
                        # launchpad-reap-config --from-file=config.yaml
                        "volumes": [
                            {"name": "home", "emptyDir": {}},
                            {"name": "config", "configMap": {"name": f"{name}-config", "optional": True}},
                        ],
                    },
                },
            }},
        },
    }


def render_k8s(doc: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(doc, sort_keys=False)

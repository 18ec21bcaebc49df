"""`python -m launchpad.train`'s start: integrations a job does not use are not imported."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


@pytest.mark.parametrize(("recipe", "skipped"), [
    ("deepspeed=None, wandb_project=None", ["deepspeed", "wandb"]),
    ("deepspeed='zero2', wandb_project=None", ["wandb"]),
    ("deepspeed=None, wandb_project='p'", ["deepspeed"]),
])
def test_deepspeed_and_wandb_look_absent_to_every_check_unless_the_job_uses_them(recipe, skipped):
    # a fresh interpreter: the marks are process-wide, and must be made before anything imports them
    script = textwrap.dedent(f"""
        import importlib.util, json, types
        from launchpad.train.__main__ import skip_unused_integrations

        recipe = types.SimpleNamespace({recipe})
        spec = types.SimpleNamespace(uses_deepspeed=bool(recipe.deepspeed), recipe=recipe)
        skipped = skip_unused_integrations(spec)
        from accelerate.utils import is_deepspeed_available
        from transformers import is_wandb_available
        print(json.dumps([skipped, bool(is_deepspeed_available()), bool(is_wandb_available()),
                          importlib.util.find_spec("deepspeed") is None]))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got, deepspeed_seen, wandb_seen, deepspeed_hidden = __import__("json").loads(proc.stdout.splitlines()[-1])
    assert got == skipped
    assert deepspeed_seen == ("deepspeed" not in skipped) and deepspeed_hidden == ("deepspeed" in skipped)
    assert wandb_seen == ("wandb" not in skipped)

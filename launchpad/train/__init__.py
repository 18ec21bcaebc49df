"""The trainer entrypoint, `python -m launchpad.train --spec job.json` (needs the [train] extra).

Modules: spec (the job spec), tiny (builtin:tiny-llama), data (datasets), trainer (the run),
callbacks (status, checkpoints, SAVE_NOW), upload (store uploads; async in issue 3), status (status.json).
Nothing heavy is imported here: torch & co. load inside functions.
"""

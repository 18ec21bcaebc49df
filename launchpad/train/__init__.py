"""The trainer entrypoint, `python -m launchpad.train --spec job.json` (needs the [train] extra).

Modules: spec (the job spec), launch (the command that starts it: one process, torchrun or the
deepspeed launcher), envcheck (versions -> env.json; fail fast on a mismatch), tiny (builtin:tiny-llama),
data (datasets), model (precision, attention, qlora/lora/full), dsconfig (DeepSpeed presets and
validation), distributed (who does what among ranks and nodes), trainer (the run), oom (advice),
export (merge an adapter into its base), callbacks (status, checkpoints, SAVE_NOW), upload (store
uploads), status (status.json).
Nothing heavy is imported here: torch & co. load inside functions.
"""

"""Many jobs in a state database at once, for the scale tests and benchmarks/state_scale.py.

Rows go in with one bulk statement per table (`StateDB._executemany`): 10,000 jobs through `create_job`
would be 20,000 separate commits. The rows are what the lifecycle writes: a readable spec, instances
with an offer's price, a few events per job.
"""

from __future__ import annotations

import json

from .jobspec import JobSpec
from .models import Instance, InstanceState, JobState, Offer
from .state import StateDB

#: the states the finished jobs cycle through
_FINISHED = (JobState.SUCCEEDED, JobState.FAILED, JobState.INTERRUPTED)


def fill_state(db: StateDB, jobs: int, *, live_every: int = 100, instances: int = 2, events: int = 3,
               start: float = 1_700_000_000.0) -> list[str]:
    """`jobs` jobs one second apart from `start` (ids ``job-00000``, ...): every `live_every`-th is PENDING
    (live, no instance), the others finished with `instances` terminated instances each; `events` events
    per job. Returns the ids, oldest first."""
    offer = Offer(provider="aws", instance_type="g5.xlarge", region="us-east-1", price_per_hour=1.2)
    job_rows, inst_rows, event_rows = [], [], []
    ids = []
    for n in range(jobs):
        job_id, created = f"job-{n:05d}", start + n
        ids.append(job_id)
        live = live_every > 0 and n % live_every == live_every - 1
        state = JobState.PENDING if live else _FINISHED[n % len(_FINISHED)]
        spec = JobSpec(job_id=job_id, recipe={"name": f"run-{n}"})
        job_rows.append((job_id, f"run-{n}", state.value, None if live else "aws", "recipe.yaml",
                         json.dumps(dict(spec.recipe)), json.dumps(spec.to_json()), "name: run\n",
                         json.dumps({"only_provider": None, "minimize": "cost"}), 0 if live else 100, 100,
                         None if live else 0.5, created, created + 60))
        for i in range(0 if live else instances):
            inst = Instance(provider="aws", id=f"i-{n:05d}-{i}", job_id=job_id, state=InstanceState.TERMINATED,
                            offer=offer, created_at=created + i, data={"disk_gb": 50})
            inst_rows.append((inst.id, "aws", job_id, inst.state.value, offer.price_per_hour,
                              json.dumps(inst.to_dict()), created + i, created + i + 30))
        for e in range(events):
            event_rows.append((job_id, created + e * 0.1, "created" if e == 0 else f"state:{state.value}", "{}"))
    db._executemany(
        "INSERT INTO jobs (id, name, state, provider, recipe_path, recipe_json, spec_json, recipe_text, options_json,"
        " step, total_steps, loss, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", job_rows)
    if inst_rows:
        db._executemany("INSERT INTO instances (id, provider, job_id, state, price_per_hour, data_json, created_at,"
                        " ended_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", inst_rows)
    if event_rows:
        db._executemany("INSERT INTO events (job_id, ts, kind, data_json) VALUES (?, ?, ?, ?)", event_rows)
    return ids

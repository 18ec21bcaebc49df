"""Regenerate the smoke recipe's chat dataset and the builtin tiny model's tokenizer corpus.

    python recipes/data/make_smoke_data.py

Writes recipes/data/smoke-chat.jsonl and launchpad/train/data/corpus.txt. Both are checked in;
the output is deterministic (seeded), so running this again changes nothing. The conversations are
short and templated on purpose: a 0.5 M-parameter random-init model must learn them in ~100 CPU
steps, so the smoke run shows a clearly falling loss in about a minute.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

NUMBERS = "zero one two three four five six seven eight nine ten eleven twelve".split()
CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo",
    "Canada": "Ottawa", "Egypt": "Cairo", "Kenya": "Nairobi", "Peru": "Lima", "Norway": "Oslo",
    "Greece": "Athens", "Poland": "Warsaw", "Chile": "Santiago", "India": "New Delhi", "China": "Beijing",
    "Brazil": "Brasilia", "Ireland": "Dublin", "Portugal": "Lisbon", "Austria": "Vienna", "Cuba": "Havana",
}
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
COLORS = {
    "a banana": "yellow", "grass": "green", "the sky": "blue", "snow": "white", "coal": "black",
    "a tomato": "red", "an orange": "orange", "a plum": "purple", "a lemon": "yellow", "a cloud": "white",
    "a leaf": "green", "the sea": "blue", "a cherry": "red", "chocolate": "brown", "a crow": "black",
}
OPPOSITES = {
    "hot": "cold", "big": "small", "fast": "slow", "up": "down", "light": "dark", "open": "closed",
    "happy": "sad", "old": "new", "early": "late", "full": "empty", "hard": "soft", "loud": "quiet",
    "long": "short", "wet": "dry", "high": "low", "rich": "poor",
}
SOUNDS = {
    "dog": "woof", "cat": "meow", "cow": "moo", "duck": "quack", "sheep": "baa", "owl": "hoot",
    "horse": "neigh", "pig": "oink", "lion": "roar", "frog": "ribbit", "bee": "buzz", "mouse": "squeak",
}
NAMES = "Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Niaj Olivia Peggy Rupert Sybil Trent Victor Walter".split()
SYSTEM = "You are a helpful assistant. Answer in one short sentence."


def qa(rng: random.Random) -> tuple[str, str]:
    kind = rng.randrange(7)
    if kind == 0:
        a, b = rng.randrange(10), rng.randrange(10)
        return f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}."
    if kind == 1:
        country = rng.choice(sorted(CAPITALS))
        return f"What is the capital of {country}?", f"The capital of {country} is {CAPITALS[country]}."
    if kind == 2:
        i = rng.randrange(7)
        return f"What day comes after {DAYS[i]}?", f"The day after {DAYS[i]} is {DAYS[(i + 1) % 7]}."
    if kind == 3:
        thing = rng.choice(sorted(COLORS))
        return f"What color is {thing}?", f"{thing[0].upper()}{thing[1:]} is {COLORS[thing]}."
    if kind == 4:
        name = rng.choice(NAMES)
        return f"Hello, my name is {name}.", f"Nice to meet you, {name}! How can I help you today?"
    if kind == 5:
        word = rng.choice(sorted(OPPOSITES))
        return f"What is the opposite of {word}?", f"The opposite of {word} is {OPPOSITES[word]}."
    animal = rng.choice(sorted(SOUNDS))
    return f"What sound does a {animal} make?", f"A {animal} says {SOUNDS[animal]}."


def conversations(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        messages = [{"role": "system", "content": SYSTEM}] if rng.random() < 0.3 else []
        for _turn in range(1 if rng.random() < 0.8 else 2):
            q, a = qa(rng)
            messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        rows.append({"messages": messages})
    return rows


PROSE = """\
launchpad fine-tunes language models on whichever machine fits the job. A recipe names the base model,
the adapter, the datasets and the resources; the planner ranks the offers; the trainer writes a checkpoint
every few steps and copies it to an object store with a manifest written last, so a checkpoint without a
manifest does not exist. When a spot machine is taken back, the job resumes from the latest complete
checkpoint on a new machine. The loss should fall as the model learns the data. The quick brown fox jumps
over the lazy dog. A helpful assistant answers questions in short, clear sentences. Numbers such as one,
two, three, ten and twelve appear in questions about sums: what is four plus five? Four plus five is nine.
The days of the week are Monday, Tuesday, Wednesday, Thursday, Friday, Saturday and Sunday.
"""


def corpus(seed: int) -> str:
    """Text the builtin tokenizer is trained on: prose plus sentences of the same shapes as the data
    (drawn with another seed), so common words become single tokens."""
    lines = [PROSE]
    rng = random.Random(seed)
    for _ in range(1500):
        q, a = qa(rng)
        lines.append(f"{q} {a}")
    lines.append(SYSTEM)
    lines.append(" ".join(NUMBERS) + " " + " ".join(str(i) for i in range(100)))
    return "\n".join(lines) + "\n"


def main() -> None:
    data = ROOT / "recipes" / "data" / "smoke-chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in conversations(400, seed=1)))
    (ROOT / "launchpad" / "train" / "data" / "corpus.txt").write_text(corpus(seed=2))
    print(f"wrote {data} and launchpad/train/data/corpus.txt")


if __name__ == "__main__":
    main()

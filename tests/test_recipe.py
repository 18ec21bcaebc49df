"""Recipe loading: every malformed input gives one clear line per problem, fast; good recipes resolve."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launchpad.errors import RecipeError
from launchpad.gpuspec import GpuSpec
from launchpad.recipe import BUILTIN_MODELS, Recipe, load_recipe, recipe_hash, recipe_schema, resolve_env
from launchpad.testing import timed

REPO = Path(__file__).resolve().parents[1]
SHOWN = "recipes/x.yaml"  # always passed relative: messages must keep it as typed

GOOD = """\
name: my-run
base_model: builtin:tiny-llama
datasets:
  - path: data/train.jsonl
max_steps: 10
"""

BOMB = "".join(
    ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n']
    + [f"l{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 9)]
)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A folder with recipes/ and recipes/data/train.jsonl; the cwd, so relative paths are relative."""
    (tmp_path / "recipes" / "data").mkdir(parents=True)
    (tmp_path / "recipes" / "data" / "train.jsonl").write_text('{"messages": []}\n')
    (tmp_path / "recipes" / "data" / "broken.json").write_text('{"zero_optimization": {"stage": 3,}}\n')
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(project: Path, content, name: str = "x.yaml") -> str:
    path = project / "recipes" / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return f"recipes/{name}"


def problems_of(shown: str, overrides=None) -> list[str]:
    with timed() as took, pytest.raises(RecipeError) as info:  # CPU time: an alias bomb expanded still fails it
        load_recipe(shown, overrides)
    assert took.cpu < 1.0, "a bad recipe must be refused fast"
    err = info.value
    assert err.problems and str(err) == "\n".join(err.problems)
    for line in err.problems:
        assert "\n" not in line and line.startswith(f"{shown}: "), line
        assert "Traceback" not in line
    return err.problems


def with_good(extra: str = "", drop: tuple[str, ...] = ()) -> str:
    lines = [ln for ln in GOOD.splitlines() if not ln.startswith(drop)] if drop else GOOD.splitlines()
    if "datasets" in drop:
        lines = [ln for ln in lines if not ln.startswith("  - path")]
    return "\n".join(lines) + "\n" + extra


# (id, file content, field named in the line, fragment of the message)
MALFORMED = [
    ("empty", "", "", "file is empty"),
    ("only-comments", "# nothing here\n\n", "", "file is empty"),
    ("top-level-list", "- name: x\n- base_model: y\n", "", "must be a mapping"),
    ("top-level-scalar", "just some words\n", "", "must be a mapping"),
    ("yaml-syntax", "name: x\nbase_model: [a, b\nlr: : 1\n", "line 3", "invalid YAML"),
    ("tab-indent", "name: x\n\tbase_model: y\n", "line 2", "invalid YAML"),
    ("nul-bytes", b"name: x\x00\x00\n", "", "binary file"),
    ("binary-junk", bytes(range(128, 256)) * 8, "line 1", "not UTF-8"),
    ("latin-1", "name: caf\xe9\n".encode("latin-1"), "line 1", "not UTF-8"),
    ("control-char", "name: x\x07\n", "line 1", "control character"),
    ("too-large", "# " + "x" * (1 << 20) + "\n", "", "too large"),
    ("just-under-the-cap", "env:\n" + "".join(f"  V{i}: {'v' * 240}\n" for i in range(1000)), "", "is required"),
    ("too-many-values", "a: [" + ",".join(["1"] * 100_001) + "]\n", "line 1", "far more than a recipe needs"),
    ("many-values-via-aliases", "a: &a [" + ",".join(["1"] * 2000) + "]\nb: [*a, *a, *a, *a, *a, *a]\n", "b",
     "alias bomb"),
    ("alias-bomb", BOMB, "", "alias bomb"),
    ("recursive-alias", "a: &a [*a]\n", "a[0]", "refers to itself"),
    ("deep-nesting", "a: " + "[" * 20000 + "]" * 20000 + "\n", "line 1", "nested more than 64"),
    ("deep-block-nesting", "".join(" " * i + f"k{i}:\n" for i in range(100)), "line 64", "nested more than 64"),
    ("two-documents", GOOD + "---\n" + GOOD, "line 6", "single document"),
    ("python-tag", "name: !!python/object/apply:os.system ['id']\n", "line 1", "constructor"),
    ("duplicate-key", GOOD + "max_steps: 20\n", "max_steps", "duplicate key on line 6 (first set on line 5"),
    ("duplicate-nested-key", GOOD + "resources:\n  gpu: A100\n  gpu: H100\n", "resources.gpu", "duplicate key"),
    ("unknown-key", GOOD + "learnin_rate: 0.1\n", "learnin_rate", "did you mean 'learning_rate'?"),
    ("unknown-nested-key", GOOD + "resources:\n  gpus: A100\n", "resources.gpus", "did you mean 'gpu'?"),
    ("section-key-at-top", GOOD + "gpu: A100\n", "gpu", "did you mean 'resources.gpu'?"),
    ("hf-trainer-alias", GOOD + "lr: 0.1\n", "lr", "did you mean 'learning_rate'?"),
    ("wrong-type-int", GOOD + "micro_batch_size: four\n", "micro_batch_size", "must be a whole number (got 'four')"),
    ("fractional-int", with_good("max_steps: 10.5\n", drop=("max_steps",)), "max_steps", "whole number"),
    ("wrong-type-str", GOOD + "lora_target_modules: [1, 2]\n", "lora_target_modules[0]", "must be text"),
    ("negative-lr", GOOD + "learning_rate: -0.1\n", "learning_rate", "must be greater than 0 (got -0.1)"),
    ("infinite-lr", GOOD + "learning_rate: .inf\n", "learning_rate", "finite"),
    ("dropout-range", GOOD + "lora_dropout: 1.5\n", "lora_dropout", "must be less than 1"),
    ("zero-micro-batch", GOOD + "micro_batch_size: 0\n", "micro_batch_size", "must be at least 1 (got 0)"),
    ("name-shell-meta", with_good('name: "x; rm -rf /"\n', drop=("name",)), "name", "a-z, 0-9 and '-'"),
    ("name-subshell", with_good('name: "$(id)"\n', drop=("name",)), "name", "not allowed ('$' '(' ')')"),
    ("name-uppercase", with_good("name: MyRun\n", drop=("name",)), "name", "e.g. 'myrun'"),
    ("name-number", with_good("name: 123\n", drop=("name",)), "name", "put it in quotes"),
    ("bad-adapter", GOOD + "adapter: qlroa\n", "adapter", "did you mean 'qlora'?"),
    ("bad-dataset-type", GOOD.replace("train.jsonl", "train.jsonl\n    type: messages"), "datasets[0].type",
     "did you mean 'chat'?"),
    ("empty-datasets", with_good("datasets: []\n", drop=("datasets",)), "datasets", "must not be empty"),
    ("missing-datasets", with_good(drop=("datasets",)), "datasets", "is required"),
    ("dataset-not-a-mapping", with_good("datasets: [data/train.jsonl]\n", drop=("datasets",)), "datasets[0]",
     "must be a mapping like {path"),
    ("dataset-missing-file", GOOD.replace("train.jsonl", "nope.jsonl"), "datasets[0].path", "dataset file not found"),
    ("dataset-bad-suffix", GOOD.replace("train.jsonl", "train.xlsx"), "datasets[0].path", "unsupported file type"),
    ("no-steps-or-epochs", with_good(drop=("max_steps",)), "num_epochs, max_steps", "set max_steps"),
    ("no-steps-and-more", with_good("adapter: x\n", drop=("max_steps",)), "num_epochs, max_steps", "set max_steps"),
    ("unknown-key-no-guess", GOOD + "zzzzzz: 1\n", "zzzzzz", "see `launchpad schema`"),
    ("date-for-name", with_good("name: 2024-01-01\n", drop=("name",)), "name", "must be text (got a date)"),
    ("bad-gpu", GOOD + "resources:\n  gpu: 'A100:x'\n", "resources.gpu", "gives the names twice"),
    ("zero-gpus", GOOD + "resources:\n  gpu: '0'\n", "resources.gpu", "at least 1"),
    ("gpu-memory-range", GOOD + "resources:\n  gpu: 80GB..24GB\n", "resources.gpu", "minimum is above the maximum"),
    ("bad-spot", GOOD + "resources:\n  spot: maybe\n", "resources.spot", "must be true, false or auto"),
    ("bad-region", GOOD + "resources:\n  regions: [us-*, 'us east']\n", "resources.regions[1]", "region name or glob"),
    ("negative-price", GOOD + "resources:\n  max_price: -1\n", "resources.max_price", "greater than 0 (got -1)"),
    ("bad-disk", GOOD + "resources:\n  disk: ssd\n", "resources.disk", "must be 'nvme' or 'any'"),
    ("bad-cuda", GOOD + "resources:\n  cuda: twelve\n", "resources.cuda", "version like '12.1'"),
    ("checkpoint-http", GOOD + "checkpoint:\n  uri: http://example.com/x\n", "checkpoint.uri",
     "unsupported scheme 'http://'"),
    ("checkpoint-no-bucket", GOOD + "checkpoint:\n  uri: s3://\n", "checkpoint.uri", "bucket name"),
    ("autostop-action", GOOD + "autostop:\n  action: delete\n", "autostop.action", "'stop' or 'terminate'"),
    ("env-bad-name", GOOD + "env:\n  BAD-NAME: x\n", "env.BAD-NAME", "variable name"),
    ("env-malformed-ref", GOOD + "env:\n  TOKEN: ${env:}\n", "env.TOKEN", "malformed reference"),
    ("env-shell-ref", GOOD + "env:\n  TOKEN: ${HOME}\n", "env.TOKEN", "malformed reference"),
    ("env-not-a-mapping", GOOD + "env: [A, B]\n", "env", "must be a mapping"),
    ("deepspeed-missing", GOOD + "deepspeed: ds/zero3.json\n", "deepspeed", "DeepSpeed config not found"),
    ("deepspeed-not-json", GOOD + "deepspeed: data/broken.json\n", "deepspeed", "not valid JSON (line 1"),
    ("deepspeed-a-folder", GOOD + "deepspeed: data\n", "deepspeed", "not a folder"),
    ("base-model-missing-path", with_good("base_model: ./models/llama\n", drop=("base_model",)), "base_model",
     "model folder not found"),
    ("base-model-bad-builtin", with_good("base_model: builtin:gpt-9\n", drop=("base_model",)), "base_model",
     "builtin:tiny-llama"),
    ("base-model-http", with_good("base_model: https://x/y\n", drop=("base_model",)), "base_model",
     "unsupported scheme"),
    ("section-not-a-mapping", GOOD + "resources: A100\n", "resources", "must be a mapping"),
]


@pytest.mark.parametrize("content, field, fragment", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_recipe_gives_one_clear_line(project, content, field, fragment):
    shown = write(project, content)
    problems = problems_of(shown)
    prefix = f"{shown}: {field}" if field else f"{shown}: "
    assert any(p.startswith(prefix) and fragment in p for p in problems), problems


def test_at_least_twenty_malformed_cases():
    assert len(MALFORMED) >= 20


def test_missing_steps_is_one_line(project):
    shown = write(project, with_good(drop=("max_steps",)))
    assert problems_of(shown) == ["recipes/x.yaml: num_epochs, max_steps: neither is set "
                                  "(set max_steps: N or num_epochs: N; max_steps wins if both)"]


def test_exact_line_for_negative_learning_rate(project):
    shown = write(project, GOOD + "learning_rate: -0.1\n")
    assert problems_of(shown) == ["recipes/x.yaml: learning_rate: must be greater than 0 (got -0.1)"]


def test_every_problem_is_reported_at_once(project):
    shown = write(project, with_good("name: Bad_Name\nadapter: x\nlearning_rate: 0\nresources: {gpu: ':'}\n",
                                     drop=("name",)))
    fields = [p.split(": ")[1] for p in problems_of(shown)]
    assert fields == ["name", "adapter", "learning_rate", "resources.gpu"]


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_missing_file_and_directory(project, kind):
    shown = "recipes/nope.yaml" if kind == "missing" else "recipes"
    (problem,) = problems_of(shown)
    assert problem == ("recipes/nope.yaml: file not found" if kind == "missing" else "recipes: is a directory, not a file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_is_refused_without_blocking(project):
    os.mkfifo(project / "recipes" / "pipe.yaml")
    assert "not a regular file" in problems_of("recipes/pipe.yaml")[0]


def test_env_values_never_appear_in_messages(project):
    shown = write(project, GOOD + "env:\n  TOKEN: hunter2-${env:}\n  OTHER: [hunter3]\n")
    text = "\n".join(problems_of(shown))
    assert "env.TOKEN" in text and "env.OTHER" in text
    assert "hunter2" not in text and "hunter3" not in text


# ---- good recipes -------------------------------------------------------------------------------

def test_good_recipe_validates_with_defaults(project):
    recipe = load_recipe(write(project, GOOD))
    assert recipe.name == "my-run" and recipe.adapter == "full" and recipe.max_steps == 10  # no adapter: full, as in Axolotl
    assert recipe.datasets[0].type == "chat"
    assert recipe.resources.gpu is None and recipe.resources.gpu_spec is None
    assert recipe.checkpoint.every_steps == 100 and recipe.autostop.action == "stop"
    assert recipe.source_path == str(project / "recipes" / "x.yaml")


def test_relative_paths_resolve_against_the_recipe_folder(project):
    recipes = project / "recipes"
    (recipes / "models" / "base").mkdir(parents=True)
    (recipes / "ds").mkdir()
    (recipes / "ds" / "zero2.json").write_text('{"zero_optimization": {"stage": 2}}')
    text = with_good(
        "base_model: models/base\ndeepspeed: ds/zero2.json\ncheckpoint:\n  uri: ckpts\n"
        "datasets:\n  - path: data/train.jsonl\n  - path: s3://bucket/d.parquet\n  - path: HuggingFaceH4/ultrachat\n"
        "    type: chat\nresources:\n  gpu: a100:40gb\n",
        drop=("base_model", "datasets"),
    )
    write(project, text)
    os.chdir(project.parent)  # the cwd must not matter
    recipe = load_recipe(recipes / "x.yaml")
    assert recipe.base_model == str(recipes / "models" / "base")
    assert recipe.deepspeed == str(recipes / "ds" / "zero2.json")
    assert recipe.checkpoint.uri == (recipes / "ckpts").as_uri()
    assert [d.path for d in recipe.datasets] == [str(recipes / "data" / "train.jsonl"), "s3://bucket/d.parquet",
                                                 "HuggingFaceH4/ultrachat"]
    assert recipe.resources.gpu == "A100:40GB"
    assert recipe.resources.gpu_spec == GpuSpec(("A100",), 40.0, 40.0, 1, 1)


@pytest.mark.parametrize(
    "base_model, expected",
    [("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B"), ("gpt2", "gpt2"), ("s3://b/models/x", "s3://b/models/x"),
     ("gs://b/m", "gs://b/m"), ("az://c/m", "az://c/m"), *[(f"builtin:{b}", f"builtin:{b}") for b in BUILTIN_MODELS]],
)
def test_base_model_forms(project, base_model, expected):
    recipe = load_recipe(write(project, with_good(f"base_model: {base_model}\n", drop=("base_model",))))
    assert recipe.base_model == expected


def test_file_uri_base_model_and_checkpoint(project):
    (project / "m").mkdir()
    text = with_good(f"base_model: file://{project / 'm'}\ncheckpoint: {{uri: 's3://bucket/ckpt/'}}\n",
                     drop=("base_model",))
    recipe = load_recipe(write(project, text))
    assert recipe.base_model == str(project / "m")
    assert recipe.checkpoint.uri == "s3://bucket/ckpt"


def test_both_steps_and_epochs_is_fine(project):
    recipe = load_recipe(write(project, GOOD + "num_epochs: 3\n"))
    assert recipe.max_steps == 10 and recipe.num_epochs == 3  # the trainer lets max_steps win


def test_benign_anchors_and_merge_keys_work(project):
    text = GOOD + "resources: &r\n  regions: [us-*]\n  spot: auto\nlora_target_modules: &m [q_proj, v_proj]\n" \
                  "lora_modules_to_save: *m\n"
    recipe = load_recipe(write(project, text))
    assert recipe.lora_modules_to_save == ["q_proj", "v_proj"] and recipe.resources.spot == "auto"


def test_model_validate_alone_does_not_touch_the_file_system():
    recipe = Recipe.model_validate({"name": "x", "base_model": "/nowhere/model", "max_steps": 1,
                                    "datasets": [{"path": "/nowhere/d.jsonl"}], "deepspeed": "/nowhere/ds.json"})
    assert recipe.base_model == "/nowhere/model" and recipe.source_path is None


def test_dump_and_validate_round_trip(project):
    """What lifecycle stores in job.json validates again, unchanged, with no file system checks."""
    (project / "recipes" / "ds.json").write_text("{}")
    recipe = load_recipe(write(project, GOOD + "deepspeed: ds.json\ncheckpoint: {uri: ck}\nresources: {gpu: 'h100:8'}\n"))
    again = Recipe.model_validate(json.loads(json.dumps(recipe.model_dump(mode="json"))))
    assert again.model_dump() == recipe.model_dump() and recipe_hash(again) == recipe_hash(recipe)


def test_source_is_not_a_recipe_key(project):
    problems = problems_of(write(project, GOOD + "source: /etc/passwd\n"))
    assert problems == ["recipes/x.yaml: source: unknown key (did you mean 'resources'?)"]
    recipe = load_recipe(write(project, GOOD))
    assert "source" not in recipe.model_dump() and "source_path" not in recipe.model_dump()


# ---- overrides ---------------------------------------------------------------------------------

def test_overrides_apply_before_validation(project):
    shown = write(project, GOOD)
    recipe = load_recipe(shown, {"max_steps": 3, "resources.gpu": "h100:8", "datasets[0].type": "alpaca",
                                 "checkpoint.every_steps": "5"})
    assert recipe.max_steps == 3 and recipe.resources.gpu == "H100:8" and recipe.datasets[0].type == "alpaca"
    assert recipe.checkpoint.every_steps == 5
    assert load_recipe(shown).max_steps == 10  # the file is untouched


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"max_steps": 0}, "recipes/x.yaml: max_steps (from override): must be at least 1 (got 0)"),
        ({"max_step": 5}, "recipes/x.yaml: max_step (from override): unknown key (did you mean 'max_steps'?)"),
        ({"resources.gpu": "A100:x"}, "recipes/x.yaml: resources.gpu (from override): GPU spec 'A100:x' gives the"),
        ({"name.x": 1}, "recipes/x.yaml: override name.x: name is not a section"),
        ({"datasets[3].path": "a"}, "recipes/x.yaml: override datasets[3].path: datasets[3] does not exist"),
        ({"a..b": 1}, "recipes/x.yaml: override 'a..b': not a key path"),
    ],
)
def test_bad_overrides_are_named(project, overrides, expected):
    problems = problems_of(write(project, GOOD), overrides)
    assert any(p.startswith(expected) for p in problems), problems


# ---- env, hash, schema --------------------------------------------------------------------------

def test_resolve_env(project):
    recipe = load_recipe(write(project, GOOD + "env:\n  HF_TOKEN: ${env:MY_TOKEN}\n  URL: http://${env:HOST}:${env:PORT}/"
                                               "\n  THREADS: 4\n  PLAIN: hello\n"))
    assert recipe.env["THREADS"] == "4"
    resolved = resolve_env(recipe, {"MY_TOKEN": "s3cr3t", "HOST": "h", "PORT": "1"})
    assert resolved == {"HF_TOKEN": "s3cr3t", "URL": "http://h:1/", "THREADS": "4", "PLAIN": "hello"}
    assert recipe.env["HF_TOKEN"] == "${env:MY_TOKEN}"  # the recipe itself never holds the secret


def test_resolve_env_missing_names_key_and_variable_not_values(project):
    recipe = load_recipe(write(project, GOOD + "env:\n  HF_TOKEN: ${env:MY_TOKEN}\n  URL: ${env:HOST}/${env:HOST}\n"))
    with pytest.raises(RecipeError) as info:
        resolve_env(recipe, {"HOST": "topsecret-host", "UNRELATED": "topsecret"})
    assert info.value.problems == [
        "recipes/x.yaml: env.HF_TOKEN: ${env:MY_TOKEN} is not set in the environment (export MY_TOKEN first)"]
    assert "topsecret" not in str(info.value)


def test_recipe_hash(project):
    shown = write(project, GOOD)
    first = recipe_hash(load_recipe(shown))
    assert len(first) == 64 and first == recipe_hash(load_recipe(shown))
    assert recipe_hash(load_recipe(shown, {"max_steps": 11})) != first
    (project / "other" / "data").mkdir(parents=True)
    (project / "other" / "data" / "train.jsonl").write_text("{}\n")
    (project / "other" / "x.yaml").write_text(GOOD)
    assert recipe_hash(load_recipe("other/x.yaml")) != first  # same text, other data file: other hash


def _walk_properties(schema: dict, node: dict, where: str):
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].split("/")[-1]]
    for name, prop in node.get("properties", {}).items():
        described = prop.get("description") or ("$ref" in prop and schema["$defs"][prop["$ref"].split("/")[-1]].get(
            "description"))  # a section's description lives on its definition
        assert described, f"{where}{name} has no description"
        for sub in [prop, *prop.get("anyOf", []), prop.get("items", {})]:
            if "$ref" in sub or "properties" in sub:
                _walk_properties(schema, sub, f"{where}{name}.")


def test_schema_describes_every_field():
    schema = recipe_schema()
    json.dumps(schema)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert set(schema["properties"]) == set(Recipe.model_fields)
    assert set(schema["required"]) == {"name", "base_model", "datasets"}
    assert schema["properties"]["name"]["pattern"] == r"^[a-z0-9][a-z0-9-]{0,62}$"
    assert "source" not in schema["properties"] and "_source_path" not in json.dumps(schema)
    for sub in ("Resources", "Checkpoint", "Autostop", "Dataset"):
        assert schema["$defs"][sub]["additionalProperties"] is False
    _walk_properties(schema, schema, "")


def test_shipped_recipes_validate():
    shipped = sorted((REPO / "recipes").glob("*.yaml"))
    if not shipped:
        pytest.skip("no recipes shipped yet")
    for path in shipped:
        load_recipe(path)


def test_import_is_light():
    code = ("import sys, launchpad.recipe; heavy = {'torch', 'transformers', 'boto3', 'rich', 'click'} & set(sys.modules);"
            "print(sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"

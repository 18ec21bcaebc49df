"""Dataset loading (chat, alpaca, completion), the job spec, and the builtin tiny model's tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launchpad.errors import BadInput
from launchpad.recipe import Dataset

pytest.importorskip("datasets")
pytest.importorskip("tokenizers")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tokenizer():
    from launchpad.train.tiny import build_tokenizer

    return build_tokenizer()


def jsonl(path: Path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_chat_only_keeps_messages_for_trl(tmp_path, tokenizer):
    from launchpad.train.data import build_dataset

    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}] * 3
    ds = build_dataset([Dataset(path=jsonl(tmp_path / "c.jsonl", rows), type="chat")], tokenizer)
    assert ds.column_names == ["messages"] and len(ds) == 3


def test_alpaca_becomes_a_conversation_and_mixes_with_completion(tmp_path, tokenizer):
    from launchpad.train.data import build_dataset

    alpaca = jsonl(tmp_path / "a.jsonl", [{"instruction": "Add", "input": "2 and 3", "output": "5"}])
    text = tmp_path / "t.json"
    text.write_text(json.dumps([{"text": "plain text"}]))
    ds = build_dataset([Dataset(path=alpaca, type="alpaca"), Dataset(path=str(text), type="completion")], tokenizer)
    assert ds.column_names == ["text"]
    assert ds[0]["text"] == "<|user|>\nAdd\n\n2 and 3<|end|>\n<|assistant|>\n5<|end|>\n"
    assert ds[1]["text"] == "plain text"


def test_a_folder_of_jsonl_files(tmp_path, tokenizer):
    from launchpad.train.data import build_dataset

    (tmp_path / "d").mkdir()
    jsonl(tmp_path / "d" / "1.jsonl", [{"text": "a"}])
    jsonl(tmp_path / "d" / "2.jsonl", [{"text": "b"}, {"text": "c"}])
    ds = build_dataset([Dataset(path=str(tmp_path / "d"), type="completion")], tokenizer)
    assert ds["text"] == ["a", "b", "c"]


@pytest.mark.parametrize(
    "kind,content,message",
    [
        ("chat", '{"messages": []}\n', "non-empty 'messages'"),
        ("chat", '{"messages": [{"role": "user"}]}\n', "string 'role' and 'content'"),
        ("alpaca", '{"instruction": "x"}\n', "'instruction' and 'output'"),
        ("completion", '{"text": ""}\n', "non-empty string 'text'"),
        ("completion", '{"text": "ok"}\n{not json\n', ":2: not valid JSON"),
        ("completion", "[1, 2]\n", "expected a JSON object per line"),
        ("completion", "\n\n", "no rows"),
    ],
)
def test_bad_rows_name_the_file_and_row(tmp_path, tokenizer, kind, content, message):
    from launchpad.train.data import build_dataset

    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(BadInput, match=message.replace("(", r"\(").replace("[", r"\[")):
        build_dataset([Dataset(path=str(path), type=kind)], tokenizer)


def test_missing_local_file_is_not_sent_to_the_hub(tmp_path, tokenizer):
    from launchpad.train.data import build_dataset

    with pytest.raises(BadInput, match="does not exist on this machine"):
        build_dataset([Dataset(path=str(tmp_path / "gone.jsonl"), type="chat")], tokenizer)


def test_smoke_dataset_is_small_and_well_formed(tokenizer):
    from launchpad.train.data import build_dataset

    path = REPO / "recipes" / "data" / "smoke-chat.jsonl"
    assert path.stat().st_size < 200_000
    ds = build_dataset([Dataset(path=str(path), type="chat")], tokenizer)
    assert len(ds) >= 300


def test_tokenizer_is_deterministic_and_knows_its_special_tokens(tokenizer):
    from launchpad.train.tiny import CONFIG, build_tokenizer

    again = build_tokenizer()
    assert again.backend_tokenizer.to_str() == tokenizer.backend_tokenizer.to_str()
    assert len(tokenizer) == CONFIG["vocab_size"]
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is 3 plus 4?"}], tokenize=False)
    assert ids == "<|user|>\nWhat is 3 plus 4?<|end|>\n"
    assert tokenizer.convert_tokens_to_ids("<|assistant|>") != tokenizer.unk_token_id
    assert tokenizer.eos_token == "<|end|>" and tokenizer.pad_token == "<|pad|>"


def _spec(tmp_path: Path, **over) -> Path:
    from launchpad.recipe import load_recipe

    recipe = load_recipe(REPO / "recipes" / "smoke-lora.yaml")
    body = {
        "job_id": "j-1",
        "recipe": recipe.model_dump(mode="json"),
        "checkpoint_uri": (tmp_path / "s").as_uri(),
        "workdir": str(tmp_path / "w"),
        "status_path": str(tmp_path / "w" / "status.json"),
        "max_steps": None,
        **over,
    }
    path = tmp_path / "job.json"
    path.write_text(json.dumps(body))
    return path


def test_spec_loads_and_max_steps_override_wins(tmp_path):
    from launchpad.train.spec import TrainJob

    spec = TrainJob.load(_spec(tmp_path, max_steps=7))
    assert spec.total_steps_override == 7 and spec.recipe.name == "smoke-lora"
    assert spec.save_now_flag == tmp_path / "w" / "SAVE_NOW"
    assert len(spec.recipe_hash) == 64
    assert TrainJob.load(_spec(tmp_path)).total_steps_override == spec.recipe.max_steps


@pytest.mark.parametrize(
    "over,field",
    [
        ({"job_id": "a/../b"}, "job_id"),
        ({"job_id": ""}, "job_id"),
        ({"workdir": "relative"}, "workdir"),
        ({"max_steps": 0}, "max_steps"),
        ({"max_steps": True}, "max_steps"),
        ({"recipe": None}, "recipe"),
        ({"recipe": {"name": "x"}}, "recipe does not validate"),
    ],
)
def test_bad_specs_name_the_field(tmp_path, over, field):
    from launchpad.train.spec import TrainJob

    with pytest.raises(BadInput, match=field):
        TrainJob.load(_spec(tmp_path, **over))


def test_a_dataset_repository_by_configuration_name_and_files(tmp_path, tokenizer):
    """A copy of a Hub dataset repository: `name` picks a configuration of its README, `data_files` its files
    (datasets.load_dataset, as for a Hub id); `field` names completion's text column."""
    from launchpad.train.data import build_dataset

    repo = tmp_path / "corpus"
    (repo / "en").mkdir(parents=True)
    (repo / "fr").mkdir()
    jsonl(repo / "en" / "a.jsonl", [{"body": "one"}, {"body": "two"}])
    jsonl(repo / "en" / "b.jsonl", [{"body": "three"}])
    jsonl(repo / "fr" / "a.jsonl", [{"body": "un"}])
    (repo / "README.md").write_text("---\nconfigs:\n- config_name: en\n  data_files: en/*.jsonl\n"
                                    "- config_name: fr\n  data_files: fr/*.jsonl\n---\n")
    french = build_dataset([Dataset(path=str(repo), type="completion", name="fr", field="body")], tokenizer,
                           cache_dir=tmp_path / "cache")
    assert french["text"] == ["un"]
    one_file = build_dataset([Dataset(path=str(repo), type="completion", data_files=["en/b.jsonl"], field="body")],
                             tokenizer, cache_dir=tmp_path / "cache")
    assert one_file["text"] == ["three"]
    with pytest.raises(BadInput, match="a completion row needs a non-empty string 'text'"):
        build_dataset([Dataset(path=str(repo), type="completion", name="en")], tokenizer, cache_dir=tmp_path / "cache")


def test_drop_system_message_and_a_named_chat_template(tmp_path, tokenizer):
    from launchpad.train.chat_templates import NAMED
    from launchpad.train.data import build_dataset

    rows = [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "hello"}]}]
    ds = build_dataset([Dataset(path=jsonl(tmp_path / "c.jsonl", rows), type="chat", drop_system_message=True)],
                       tokenizer)
    assert [m["role"] for m in ds[0]["messages"]] == ["user", "assistant"]
    for name, template in NAMED.items():  # each renders the prompt as a prefix of the conversation (TRL's masking)
        tokenizer_copy = type(tokenizer).from_pretrained(_saved(tokenizer, tmp_path))
        tokenizer_copy.chat_template = template
        whole = tokenizer_copy.apply_chat_template(rows[0]["messages"], tokenize=False)
        prompt = tokenizer_copy.apply_chat_template(rows[0]["messages"][:2], tokenize=False, add_generation_prompt=True)
        assert whole.startswith(prompt) and whole.endswith(("<|im_end|>\n", "<|eot_id|>", "<|end|>\n", "<end_of_turn>\n")), name
        assert "hello" in whole and "Be brief." in whole, name


def _saved(tokenizer, tmp_path: Path) -> str:
    folder = tmp_path / "tok"
    if not folder.exists():
        tokenizer.save_pretrained(folder)
    return str(folder)


def test_a_tokenizer_without_a_chat_template_names_the_fix(tmp_path, tokenizer):
    from launchpad.train.data import build_dataset

    bare = type(tokenizer).from_pretrained(_saved(tokenizer, tmp_path))
    bare.chat_template = None
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}]
    with pytest.raises(BadInput, match="no chat template.*set chat_template: chatml"):
        build_dataset([Dataset(path=jsonl(tmp_path / "c.jsonl", rows), type="chat")], bare)


CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi there"},
        {"role": "assistant", "content": "hello"}, {"role": "user", "content": "and now"},
        {"role": "assistant", "content": "bye"}]
MARKERS = {"chatml": "<|im_end|>", "qwen_25": "<|im_end|>", "llama3": "<|eot_id|>", "phi_3": "<|end|>",
           "gemma": "<end_of_turn>", None: "<|end|>"}  # None: the tiny model's own template


def _trained_runs(tokenizer, row) -> list[str]:
    """The text of each run of consecutive tokens in the loss."""
    runs, run = [], []
    for token, m in zip(row["input_ids"], row["assistant_masks"], strict=True):
        if m:
            run.append(token)
        elif run:
            runs.append(tokenizer.decode(run))
            run = []
    return runs + ([tokenizer.decode(run)] if run else [])


def _masked(tmp_path, tokenizer, rows, lines=None, template=None, **spec):
    from launchpad.train.data import build_dataset

    tok = type(tokenizer).from_pretrained(_saved(tokenizer, tmp_path))
    if template:
        from launchpad.train.chat_templates import NAMED

        tok.chat_template = NAMED.get(template, template)
    ds = build_dataset([Dataset(path=jsonl(tmp_path / "c.jsonl", rows), type="chat", **spec)], tok,
                       train_on_inputs=False, log=(lines if lines is not None else []).append)
    return tok, ds


@pytest.mark.parametrize("template", list(MARKERS))
def test_every_assistant_turn_is_trained_with_its_end_marker(tmp_path, tokenizer, template):
    lines: list[str] = []
    tok, ds = _masked(tmp_path, tokenizer, [{"messages": CHAT}], lines, template)
    assert ds.column_names == ["input_ids", "assistant_masks"]
    marker = MARKERS[template]
    assert _trained_runs(tok, ds[0]) == [f"hello{marker}", f"bye{marker}"]
    assert tok.decode(ds[0]["input_ids"]) == tok.apply_chat_template(CHAT, tokenize=False)  # the same text TRL renders
    assert "train_on_inputs: false: the loss covers every assistant turn and its end-of-turn marker" in lines[-1]


@pytest.mark.parametrize(("spec", "runs"), [
    ({"roles_to_train": ["user", "assistant"], "train_on_eos": "none"}, ["hi there", "hello", "and now", "bye"]),
    ({"train_on_eos": "all"}, ["<|im_end|>", "<|im_end|>", "hello<|im_end|>", "<|im_end|>", "bye<|im_end|>"]),
    ({"train_on_eos": "last"}, ["hello", "bye<|im_end|>"]),
    ({"roles_to_train": ["user"]}, ["hi there<|im_end|>", "and now<|im_end|>"]),
])
def test_roles_to_train_and_train_on_eos(tmp_path, tokenizer, spec, runs):
    tok, ds = _masked(tmp_path, tokenizer, [{"messages": CHAT}], template="chatml", **spec)
    assert _trained_runs(tok, ds[0]) == runs


def test_completion_rows_are_trained_whole_beside_masked_chats(tmp_path, tokenizer):
    from launchpad.train.data import build_dataset

    text = jsonl(tmp_path / "t.jsonl", [{"text": "plain text"}])
    lines: list[str] = []
    ds = build_dataset([Dataset(path=jsonl(tmp_path / "c.jsonl", [{"messages": CHAT}]), type="chat"),
                        Dataset(path=text, type="completion")], tokenizer, train_on_inputs=False, log=lines.append)
    assert _trained_runs(tokenizer, ds[0]) == ["hello<|end|>", "bye<|end|>"]
    plain = ds[1]
    assert all(plain["assistant_masks"]) and plain["input_ids"][-1] == tokenizer.eos_token_id  # EOS appended, as TRL does
    assert tokenizer.decode(plain["input_ids"][:-1]) == "plain text" and "(completion rows whole)" in lines[-1]


def test_rows_with_nothing_to_train_are_left_out_and_none_at_all_is_an_error(tmp_path, tokenizer):
    lines: list[str] = []
    only_user = {"messages": [{"role": "user", "content": "hi"}]}
    _, ds = _masked(tmp_path, tokenizer, [{"messages": CHAT}, only_user], lines)
    assert len(ds) == 1 and any("1 rows have no turn to train on: left out" in line for line in lines)
    with pytest.raises(BadInput, match="no row has a turn to train on .*roles_to_train"):
        _masked(tmp_path, tokenizer, [only_user])


def test_a_template_that_is_not_prefix_stable_falls_back_to_the_final_reply(tmp_path, tokenizer):
    counting = "{{ messages | length }}{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\n' }}{% endfor %}"
    lines: list[str] = []
    _, ds = _masked(tmp_path, tokenizer, [{"messages": CHAT}], lines, counting)
    assert ds.column_names == ["prompt", "completion"] and ds[0]["completion"] == [CHAT[-1]]
    assert any("renders a conversation's start unlike the whole" in line for line in lines)

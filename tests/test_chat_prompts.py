"""Chat-format prompts (TRL's conversational format): a JSONL `prompt` that is a list of
messages goes through the chat template as those messages, never as the Python repr of
the list; a model without a chat template gets plain text."""

import json
from pathlib import Path

import pytest
from test_training import tiny_config

from aha.config import TaskConfig
from aha.models.tiny import tiny_tokenizer
from aha.prompts import plain_text_prompt, prompt_text
from aha.tasks import TaskError, build_task, chat_messages, encode_prompts
from aha.tasks.base import Task
from aha.training.loop import train

CHAT = [{"role": "system", "content": "Answer with one word."}, {"role": "user", "content": "Capital of France?"}]


def write_task(tmp_path, prompts) -> tuple[str, str]:
    lines = "".join(json.dumps({"prompt": p, "answer": "Paris"}) + "\n" for p in prompts)
    (tmp_path / "train.jsonl").write_text(lines)
    (tmp_path / "test.jsonl").write_text(lines)
    return str(tmp_path / "train.jsonl"), str(tmp_path / "test.jsonl")


def test_a_conversation_is_rendered_by_the_chat_template_as_its_messages(tmp_path):
    train_file, test_file = write_task(tmp_path, [CHAT])
    task = build_task(TaskConfig(data=train_file, eval_data=test_file))
    tok = tiny_tokenizer()
    text = tok.decode(encode_prompts(tok, task, task.train)[0])
    expected = tok.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert text == expected
    assert "{'role'" not in text and "Capital of France?" in text and "Answer with one word." in text


def test_the_samples_own_system_message_wins_and_few_shot_turns_go_after_it():
    task = Task("t", [], [], system_prompt="Be brief.", few_shot=[{"prompt": "Capital of Peru?", "answer": "Lima"}])
    assert chat_messages(task, {"prompt": CHAT}) == [
        CHAT[0], {"role": "user", "content": "Capital of Peru?"}, {"role": "assistant", "content": "Lima"}, CHAT[1]]
    no_system = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
                 {"role": "user", "content": "Capital?"}]
    assert chat_messages(task, {"prompt": no_system}) == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of Peru?"},
        {"role": "assistant", "content": "Lima"}, *no_system]
    assert chat_messages(Task("t", [], []), {"prompt": "Capital?"}) == [{"role": "user", "content": "Capital?"}]


@pytest.mark.parametrize("prompt, message", [
    ([], "prompt is an empty list of chat messages"),
    ([{"role": "user"}], "prompt[0] must be a message with exactly the keys role and content, got ['role']"),
    (["Capital?"], "prompt[0] must be a message with exactly the keys role and content, got str"),
    ([{"role": "human", "content": "x"}], "prompt[0].role must be one of system, user, assistant, got 'human'"),
    ([{"role": "user", "content": ["x"]}], "prompt[0].content must be a string, got list"),
    ([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
     "the last message of a chat prompt must be the user's (the model answers it), got 'assistant'"),
    ({"role": "user", "content": "x"}, "prompt must be a string or a list of chat messages, got dict"),
])
def test_a_malformed_conversation_names_the_file_and_line(tmp_path, prompt, message):
    train_file, test_file = write_task(tmp_path, ["fine", prompt])
    with pytest.raises(TaskError) as err:
        build_task(TaskConfig(data=train_file, eval_data=test_file))
    assert str(err.value) == f"{train_file}:2: {message}"


def test_a_model_without_a_chat_template_gets_plain_text():
    tok = tiny_tokenizer()
    tok.chat_template = None
    task = Task("t", [], [])
    assert encode_prompts(tok, task, [{"prompt": "What is 2 + 2?"}])[0] == tok("What is 2 + 2?")["input_ids"]
    assert plain_text_prompt(CHAT) == "System: Answer with one word.\n\nUser: Capital of France?\n\nAssistant:"
    assert encode_prompts(tok, task, [{"prompt": CHAT}])[0] == tok(plain_text_prompt(CHAT))["input_ids"]


def test_a_chat_template_that_refuses_a_prompt_names_the_sample():
    """Gemma's template refuses a system turn; an empty rendering has nothing to sample from.
    Either is aha's TaskError naming the sample, which the CLI prints (exit 2), not a Jinja
    traceback from the middle of a run."""
    tok = tiny_tokenizer()
    tok.chat_template = ("{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not "
                         "supported') }}{% endif %}{{ m['content'] }}{% endfor %}")
    task = Task("t", [], [], system_prompt="Be brief.")
    with pytest.raises(TaskError) as err:
        encode_prompts(tok, task, [{"id": "q-3", "prompt": "Capital of Peru?"}])
    assert str(err.value) == ("sample 'q-3': the model's chat template cannot write its prompt (TemplateError: System "
                              "role not supported); messages: ['system', 'user']")
    assert encode_prompts(tok, Task("t", [], []), [{"id": "q-3", "prompt": "Capital of Peru?"}])[0]
    tok.chat_template = "{% if false %}{{ messages }}{% endif %}"
    with pytest.raises(TaskError, match=r"^sample 'q-4': its prompt is no tokens as the model's chat template writes "
                                        r"it$"):
        encode_prompts(tok, Task("t", [], []), [{"id": "q-4", "prompt": "Capital of Peru?"}])


def test_prompt_text_reads_a_conversation_as_turns():
    assert prompt_text(CHAT) == "system: Answer with one word.\nuser: Capital of France?"
    assert prompt_text("plain") == "plain"


def test_a_run_on_chat_prompts_trains_and_reports_the_turns(tmp_path):
    train_file, test_file = write_task(tmp_path, [CHAT, [{"role": "user", "content": "Capital of Spain?"}]])
    config = tiny_config(tmp_path, "chat", f"task={{data: '{train_file}', eval_data: '{test_file}', name: capitals}}",
                         "reward=[{fn: exact_match}]", "train.steps=1", "rollout.prompts_per_step=2",
                         "train.max_reward_failure_rate=1.0", "eval.before=false", "eval.after=false",
                         "train.report=true")
    run = Path(train(config, echo=lambda *_: None).run_dir)
    logged = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert all(isinstance(s["prompt"], list) for s in logged)
    page = (run / "report.html").read_text()
    assert "user: Capital of" in page and "{&#x27;role&#x27;" not in page

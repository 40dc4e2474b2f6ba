import json

import pytest

from aha.config import TaskConfig
from aha.models import load
from aha.tasks import PromptSampler, TaskError, build_task, chat_messages, encode_prompts


def test_arithmetic_splits_are_disjoint_even_for_swapped_operands():
    cfg = TaskConfig(name="arithmetic", a_min=2, a_max=30, b_min=2, b_max=9, num_eval=150)
    task = build_task(cfg)
    assert len(task.eval) == 150
    canonical = lambda s: (s["id"][:0], tuple(sorted(int(x) for x in s["id"].split("*"))))
    train_keys = {canonical(s) for s in task.train}
    assert not train_keys & {canonical(s) for s in task.eval}
    # every problem of the range is used exactly once
    assert len(task.train) + len(task.eval) == 29 * 8
    assert all(s["answer"] == str(eval(s["id"])) for s in task.train + task.eval)


def test_arithmetic_is_seeded():
    a = build_task(TaskConfig(name="arithmetic", seed=1))
    b = build_task(TaskConfig(name="arithmetic", seed=1))
    c = build_task(TaskConfig(name="arithmetic", seed=2))
    assert [s["id"] for s in a.eval] == [s["id"] for s in b.eval]
    assert [s["id"] for s in a.eval] != [s["id"] for s in c.eval]


def test_arithmetic_range_too_small_for_held_out():
    with pytest.raises(TaskError, match="all taken by task.num_eval=200"):
        build_task(TaskConfig(name="arithmetic", a_max=9))


def test_unknown_task_name():
    with pytest.raises(TaskError, match="task.name: unknown built-in task 'gsm9k'"):
        build_task(TaskConfig(name="gsm9k"))


def test_jsonl_keeps_extra_fields(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"prompt": "1+1", "answer": 2, "level": 3}\n\n{"prompt": "2+2", "answer": '
                                          '"4", "id": "x"}\n')
    (tmp_path / "test.jsonl").write_text('{"prompt": "3+3", "answer": 6}\n')
    task = build_task(TaskConfig(data="train.jsonl", eval_data="test.jsonl"), base_dir=tmp_path)
    assert task.train[0] == {"prompt": "1+1", "answer": 2, "level": 3, "id": "train.jsonl:1"}
    assert task.train[1]["id"] == "x"
    assert len(task.eval) == 1


@pytest.mark.parametrize("content, message", [
    ('{"prompt": "a", "answer": 1}\n{"prompt": "b", answer: 2}\n', r"train\.jsonl:2: not valid JSON"),
    ('{"prompt": "a", "answer": 1}\n{"prompt": "b"}\n', r"train\.jsonl:2: missing field\(s\) answer"),
    ('[1, 2]\n', r"train\.jsonl:1: each row must be an object of fields"),
    ('\n', r"train\.jsonl: no samples"),
])
def test_jsonl_errors_name_file_and_line(tmp_path, content, message):
    (tmp_path / "train.jsonl").write_text(content)
    (tmp_path / "test.jsonl").write_text('{"prompt": "3+3", "answer": 6}\n')
    with pytest.raises(TaskError, match=message):
        build_task(TaskConfig(data="train.jsonl", eval_data="test.jsonl"), base_dir=tmp_path)


def test_jsonl_needs_eval_data_and_existing_file(tmp_path):
    with pytest.raises(TaskError, match="task.data needs held-out samples for evaluation: give task.eval_data"):
        build_task(TaskConfig(data="train.jsonl"), base_dir=tmp_path)
    with pytest.raises(TaskError, match="task data file not found"):
        build_task(TaskConfig(data="nope.jsonl", eval_data="nope.jsonl"), base_dir=tmp_path)


def test_chat_prompt_has_system_and_few_shot_turns():
    task = build_task(TaskConfig(name="arithmetic", system_prompt="Be brief.",
                                 few_shot=[{"prompt": "2 * 3", "answer": "6"}]))
    messages = chat_messages(task, {"prompt": "4 * 5"})
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    tokenizer = load("tiny").tokenizer
    text = tokenizer.decode(encode_prompts(tokenizer, task, [{"prompt": "4 * 5"}])[0])
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2 * 3<|im_end|>\n"
                    "<|im_start|>assistant\n6<|im_end|>\n<|im_start|>user\n4 * 5<|im_end|>\n<|im_start|>assistant\n")


def test_sampler_epochs_and_exact_resume():
    samples = [{"id": i} for i in range(5)]
    s = PromptSampler(samples, seed=3)
    first_epoch = [x["id"] for x in s.next(5)]
    assert sorted(first_epoch) == list(range(5))
    s.next(2)
    state = json.loads(json.dumps(s.state()))
    expected = [x["id"] for x in s.next(7)]
    resumed = PromptSampler(samples, seed=3)
    resumed.load_state(state)
    assert [x["id"] for x in resumed.next(7)] == expected


def _two_files(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"prompt": "Capital of France?", "answer": "Paris"}\n')
    (tmp_path / "test.jsonl").write_text('{"prompt": "Capital of Peru?", "answer": "Lima"}\n')
    return str(tmp_path / "train.jsonl"), str(tmp_path / "test.jsonl")


def test_a_jsonl_task_is_named_by_the_user_or_by_its_held_out_file_never_by_its_train_file(tmp_path):
    from aha.config import load_config
    from aha.eval.scoring import held_out_name
    from aha.tracking.run_report import _config_summary

    train, test = _two_files(tmp_path)
    named = load_config(None, [f"task.data={train}", f"task.eval_data={test}", "task.name=capitals"])
    assert build_task(named.task).name == "capitals" and held_out_name(named, "capitals") == "capitals"
    plain = load_config(None, [f"task.data={train}", f"task.eval_data={test}"])
    assert held_out_name(plain, build_task(plain.task).name) == "test"
    summary = _config_summary({"model": "m", "task": {"data": train, "eval_data": test}})
    assert f"task test (train {train}, held-out {test})" in summary
    summary = _config_summary({"model": "m", "task": {"name": "capitals", "data": train, "eval_data": test}})
    assert f"task capitals (train {train}, held-out {test})" in summary
    assert "task arithmetic," in _config_summary({"model": "m", "task": {"name": "arithmetic"}})


def test_a_built_in_name_with_jsonl_data_is_refused(tmp_path):
    train, test = _two_files(tmp_path)
    with pytest.raises(TaskError, match="task.name 'arithmetic' is a built-in task and task.data a JSONL task"):
        build_task(TaskConfig(name="arithmetic", data=train, eval_data=test))


def test_overriding_one_task_key_keeps_the_default_built_in_task():
    # a config without a task section, and one task key on the command line
    from aha.config import load_config

    config = load_config(None, ["task.num_eval=7"])
    task = build_task(config.task)
    assert task.name == "arithmetic" and len(task.eval) == 7
    with pytest.raises(TaskError, match="task.eval_data needs task.data"):
        build_task(load_config(None, ["task.eval_data=held_out.jsonl"]).task)

"""Users' data in the formats they keep it in: JSON lines, a JSON array, Parquet, CSV / TSV and
datasets folders, with their own field names, a prompt template, chat-format prompts, and
errors that name the file and the row."""

import json

import pytest

from aha.config import TaskConfig
from aha.tasks import TaskError, build_task

ROWS = [{"question": "What is 2 + 3?", "solution": "5", "level": 1},
        {"question": "What is 7 * 6?", "solution": "42", "level": 2}]


def write(path, rows, fmt):
    """rows in format fmt at path (its suffix is fmt's)."""
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "json":
        path.write_text(json.dumps(rows, indent=2))
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    elif fmt in ("csv", "tsv"):
        import csv

        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter="\t" if fmt == "tsv" else ",")
            writer.writeheader()
            writer.writerows(rows)
    elif fmt == "datasets":
        from datasets import Dataset

        Dataset.from_list(rows).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "json", "parquet", "csv", "tsv", "datasets"])
def test_every_format_gives_the_same_samples(tmp_path, fmt):
    suffix = "" if fmt == "datasets" else f".{fmt}"
    train = write(tmp_path / f"train{suffix}", ROWS, fmt)
    held_out = write(tmp_path / f"test{suffix}", ROWS[:1], fmt)
    task = build_task(TaskConfig(data=str(train), eval_data=str(held_out), prompt_field="question",
                                 answer_field="solution"))
    assert [s["prompt"] for s in task.train] == ["What is 2 + 3?", "What is 7 * 6?"]
    assert [str(s["answer"]) for s in task.train] == ["5", "42"]
    assert [str(s["level"]) for s in task.train] == ["1", "2"]  # other fields are kept for rewards
    assert len(task.eval) == 1 and task.name == "train"
    assert len({s["id"] for s in task.train}) == 2


def test_a_prompt_template_writes_the_prompt_from_the_rows_fields(tmp_path):
    rows = [{"q": "2 + 3", "choices": "A) 5 B) 6", "answer": "A"}]
    train = write(tmp_path / "train.parquet", rows, "parquet")
    task = build_task(TaskConfig(data=str(train), eval_data=str(train),
                                 prompt_template="Question: {q}\nChoices: {choices}\nAnswer with a letter {{A-D}}."))
    assert task.train[0]["prompt"] == "Question: 2 + 3\nChoices: A) 5 B) 6\nAnswer with a letter {A-D}."
    assert task.train[0]["answer"] == "A"


def test_chat_format_prompts_come_through_parquet_and_datasets_folders(tmp_path):
    rows = [{"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
             "answer": "4"}]
    for fmt, name in (("parquet", "chat.parquet"), ("datasets", "chat_ds")):
        path = write(tmp_path / name, rows, fmt)
        task = build_task(TaskConfig(data=str(path), eval_data=str(path)))
        assert task.train[0]["prompt"] == rows[0]["prompt"]


def test_a_datasets_folder_with_splits_gives_train_and_held_out(tmp_path):
    from datasets import Dataset, DatasetDict

    DatasetDict({"train": Dataset.from_list(ROWS), "test": Dataset.from_list(ROWS[1:])}).save_to_disk(
        str(tmp_path / "ds"))
    task = build_task(TaskConfig(data=str(tmp_path / "ds"), prompt_field="question", answer_field="solution"))
    assert len(task.train) == 2 and [s["prompt"] for s in task.eval] == ["What is 7 * 6?"]
    with pytest.raises(TaskError, match=r"ds: no split 'validation' in this datasets folder \(splits: train, test\)"):
        build_task(TaskConfig(data=str(tmp_path / "ds"), eval_split="validation", prompt_field="question",
                              answer_field="solution"))


@pytest.mark.parametrize("fmt, content, message", [
    ("csv", "question,solution\nWhat?,5\nOdd,6,7\n",
     r"train\.csv:3: 3 cells where the header \(.*train\.csv:1\) has 2"),
    ("csv", "question,solution\nWhat?\n", r"train\.csv:2: 1 cells where the header"),
    ("csv", "question,answer\n2+2,4\n", r"train\.csv:2: missing field\(s\) solution \(or tests, for a code task\)"),
    ("tsv", "question\tsolution\n", r"train\.tsv: no samples \(empty file\)"),
    ("json", '[{"question": "a", "solution": 1}, 3]', r"train\.json row 2: each row must be an object of fields"),
    ("json", '[{"question": "a", "solution": 1},\n {"question": }]', r"train\.json:2: not valid JSON"),
    ("jsonl", '{"question": "a", "solution": 1}\n{"question": 5, "solution": 2}\n',
     r"train\.jsonl:2: prompt must be a string or a list of chat messages, got int"),
    ("parquet", b"PAR1 not really parquet", r"train\.parquet: not a readable Parquet file"),
    ("txt", "question,solution\n", r"train\.txt:1: not valid JSON .* \(read as JSON lines: aha reads \.jsonl"),
])
def test_malformed_data_is_an_error_naming_the_file_and_row(tmp_path, fmt, content, message):
    train = tmp_path / f"train.{fmt}"
    (train.write_bytes if isinstance(content, bytes) else train.write_text)(content)
    held_out = write(tmp_path / "test.jsonl", [{"question": "q", "solution": "1"}], "jsonl")
    with pytest.raises(TaskError, match=message):
        build_task(TaskConfig(data=str(train), eval_data=str(held_out), prompt_field="question",
                              answer_field="solution"))


def test_a_template_naming_a_field_the_row_lacks_is_an_error_naming_the_row(tmp_path):
    train = write(tmp_path / "train.parquet", ROWS, "parquet")
    with pytest.raises(TaskError, match=r"train\.parquet row 1: missing field\(s\) topic \(the row has: question, "
                                        r"solution, level\)"):
        build_task(TaskConfig(data=str(train), eval_data=str(train), prompt_template="{topic}: {question}",
                              answer_field="solution"))
    with pytest.raises(TaskError, match=r"task.prompt_template: \{0\} is not a field name"):
        build_task(TaskConfig(data=str(train), eval_data=str(train), prompt_template="{0}", answer_field="solution"))


def test_an_empty_split_and_a_missing_file_are_errors(tmp_path):
    empty = write(tmp_path / "empty.parquet", [{"prompt": "x", "answer": "y"}], "parquet")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"prompt": "x", "answer": "y"}]).slice(0, 0), empty)
    good = write(tmp_path / "good.jsonl", [{"prompt": "x", "answer": "y"}], "jsonl")
    with pytest.raises(TaskError, match=r"empty\.parquet: no samples \(empty file\)"):
        build_task(TaskConfig(data=str(good), eval_data=str(empty)))
    with pytest.raises(TaskError, match=r"task data file not found: .*nowhere\.csv"):
        build_task(TaskConfig(data=str(tmp_path / "nowhere.csv"), eval_data=str(good)))
    from datasets import Dataset

    Dataset.from_list([]).save_to_disk(str(tmp_path / "no_rows"))  # datasets itself cannot read this back
    for stream in (False, True):
        with pytest.raises(TaskError, match=r"no_rows: the datasets folder holds no rows \(an empty split\)"):
            build_task(TaskConfig(data=str(good), eval_data=str(tmp_path / "no_rows"), stream=stream))
    from datasets import DatasetDict

    splits = tmp_path / "splits"
    rows = [{"prompt": "x", "answer": "y"}, {"prompt": "z", "answer": "w"}]
    DatasetDict({"train": Dataset.from_list(rows), "test": Dataset.from_list([])}).save_to_disk(str(splits))
    task = build_task(TaskConfig(data=str(splits), eval_data=str(good)))  # the train split alone is read
    assert [s["prompt"] for s in task.train] == ["x", "z"]
    with pytest.raises(TaskError, match=r"splits\[test\]: the datasets folder holds no rows \(an empty split\)"):
        build_task(TaskConfig(data=str(splits)))
    with pytest.raises(TaskError, match=r"splits: split test of the datasets folder holds no rows \(an empty split\)"):
        build_task(TaskConfig(data=str(splits), split="validation", eval_data=str(good)))


def test_training_data_for_sft_reads_the_same_formats(tmp_path):
    from aha.training.supervised.sequences import read_examples

    path = write(tmp_path / "sft.csv", [{"prompt": "2+2?", "completion": "4"}], "csv")
    assert [(r["prompt"], r["completion"], r["where"]) for r in read_examples(path, ("completion",))] == \
        [("2+2?", "4", f"{path}:2")]


def test_what_users_files_really_hold_loads_or_is_named(tmp_path):
    import datetime
    from decimal import Decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    # a line separator inside a JSON string (json.dumps with ensure_ascii=False writes it as is)
    (tmp_path / "ls.jsonl").write_text(json.dumps({"prompt": "one\u2028two", "answer": "1"}, ensure_ascii=False) + "\n")
    assert build_task(TaskConfig(data=str(tmp_path / "ls.jsonl"), eval_data=str(tmp_path / "ls.jsonl"))).train[0][
        "prompt"] == "one\u2028two"
    # Excel's "CSV UTF-8" starts with a byte-order mark
    (tmp_path / "bom.csv").write_bytes("\ufeffprompt,answer\r\n2+2?,4\r\n".encode("utf-8"))
    assert build_task(TaskConfig(data=str(tmp_path / "bom.csv"), eval_data=str(tmp_path / "bom.csv"))).train[0][
        "prompt"] == "2+2?"
    # Parquet values JSON cannot hold come as JSON holds them; Arrow's merged message keys are dropped when unset
    pq.write_table(pa.Table.from_pylist([{
        "prompt": [{"role": "user", "content": "hi", "name": "x"}, {"role": "assistant", "content": "yo"},
                   {"role": "user", "content": "2+2?"}],
        "answer": Decimal("4.0"), "day": datetime.date(2026, 12, 1)}]), tmp_path / "odd.parquet")
    with pytest.raises(TaskError, match=r"odd\.parquet row 1: prompt\[0\] must be a message with exactly the keys"):
        build_task(TaskConfig(data=str(tmp_path / "odd.parquet"), eval_data=str(tmp_path / "odd.parquet")))
    pq.write_table(pa.Table.from_pylist([{
        "prompt": [{"role": "user", "content": "hi", "name": None}, {"role": "user", "content": "2+2?", "name": None}],
        "answer": Decimal("4.0"), "day": datetime.date(2026, 12, 1)}]), tmp_path / "odd.parquet")
    sample = build_task(TaskConfig(data=str(tmp_path / "odd.parquet"),
                                   eval_data=str(tmp_path / "odd.parquet"))).train[0]
    assert sample["prompt"][1] == {"role": "user", "content": "2+2?"} and sample["answer"] == 4.0
    assert json.loads(json.dumps(sample))["day"] == "2026-12-01"


def test_ids_must_be_unique_and_a_single_dataset_needs_its_held_out_file(tmp_path):
    write(tmp_path / "ids.csv", [{"id": "a", "prompt": "x", "answer": "1"}, {"id": "a", "prompt": "y", "answer": "2"}],
          "csv")
    with pytest.raises(TaskError, match=r"ids\.csv:3: id 'a' is also the id of .*ids\.csv:2"):
        build_task(TaskConfig(data=str(tmp_path / "ids.csv"), eval_data=str(tmp_path / "ids.csv")))
    write(tmp_path / "blank.csv", [{"id": "", "prompt": "x", "answer": "1"}], "csv")
    with pytest.raises(TaskError, match=r"blank\.csv:2: id '' is empty"):
        build_task(TaskConfig(data=str(tmp_path / "blank.csv"), eval_data=str(tmp_path / "blank.csv")))
    write(tmp_path / "single", ROWS, "datasets")
    with pytest.raises(TaskError, match="task.data needs held-out samples for evaluation: give task.eval_data"):
        build_task(TaskConfig(data=str(tmp_path / "single"), prompt_field="question", answer_field="solution"))


def test_a_template_the_row_cannot_fill_is_an_error_naming_the_row(tmp_path):
    train = write(tmp_path / "train.jsonl", [{"q": "hi", "answer": "1"}], "jsonl")
    with pytest.raises(TaskError, match=r"task.prompt_template: Single '\{' encountered"):
        build_task(TaskConfig(data=str(train), eval_data=str(train), prompt_template="Q: {q} {"))
    with pytest.raises(TaskError, match=r"train\.jsonl:1: task.prompt_template could not be filled from this row"):
        build_task(TaskConfig(data=str(train), eval_data=str(train), prompt_template="Q: {q:.2f}"))


@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "csv", "tsv", "datasets"])
def test_a_streamed_task_gives_the_same_samples_read_from_disk(tmp_path, fmt):
    from aha.tasks.samples import StreamedSamples

    rows = [{"question": f"What is {i} + {i}?\nOn two lines, with a comma, and \"quotes\"", "solution": str(2 * i),
             "level": i % 3} for i in range(40)]
    suffix = "" if fmt == "datasets" else f".{fmt}"
    train, held_out = write(tmp_path / f"train{suffix}", rows, fmt), write(tmp_path / f"test{suffix}", rows[:3], fmt)
    config = dict(data=str(train), eval_data=str(held_out), prompt_field="question", answer_field="solution")
    loaded, streamed = build_task(TaskConfig(**config)), build_task(TaskConfig(**config, stream=True))
    assert isinstance(streamed.train, StreamedSamples) and len(streamed.train) == 40
    assert list(streamed.train) == loaded.train and streamed.eval[:2] == loaded.eval[:2]
    assert streamed.train[17] == loaded.train[17] and streamed.train[-1] == loaded.train[-1]
    if fmt in ("jsonl", "csv", "tsv"):  # read back from the file when asked for: a change on disk shows
        train.write_bytes(train.read_bytes().replace(b"What is 39 + 39?", b"What is 93 + 93?"))
        assert streamed.train[39]["prompt"].startswith("What is 93 + 93?")


def test_streaming_keeps_rows_on_disk(tmp_path):
    """20 MB of JSON lines: the streamed task holds where each row is, not the rows."""
    import tracemalloc

    long = "x" * 2000
    path = tmp_path / "big.jsonl"
    with open(path, "w") as f:
        for i in range(10_000):
            f.write(json.dumps({"prompt": f"{i} {long}", "answer": str(i)}) + "\n")
    tracemalloc.start()
    task = build_task(TaskConfig(data=str(path), eval_data=str(path), stream=True))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert path.stat().st_size > 20e6 and peak < 4e6, peak
    assert task.train[9_999]["answer"] == "9999" and task.train[123]["prompt"].startswith("123 xx")


@pytest.mark.parametrize("content, message", [
    ('{"prompt": "a", "answer": "1"}\n{"prompt": "b"}\n', r"big\.jsonl:2: missing field\(s\) answer"),
    ('{"prompt": "a", "answer": "1", "id": "k"}\n\n{"prompt": "b", "answer": "2", "id": "k"}\n',
     r"big\.jsonl:3: id 'k' is also the id of .*big\.jsonl:1"),
    ('{"prompt": "a", "answer": "1"}\n{"prompt": \n', r"big\.jsonl:2: not valid JSON"),
])
def test_a_streamed_file_is_checked_whole_before_training(tmp_path, content, message):
    path = tmp_path / "big.jsonl"
    path.write_text(content)
    with pytest.raises(TaskError, match=message):
        build_task(TaskConfig(data=str(path), eval_data=str(path), stream=True))


def test_stream_config_errors(tmp_path):
    from aha.config import Config

    array = write(tmp_path / "train.json", ROWS, "json")
    with pytest.raises(TaskError, match=r"train\.json: a \.json array cannot be streamed"):
        build_task(TaskConfig(data=str(array), eval_data=str(array), stream=True))
    with pytest.raises(ValueError, match="task.stream reads task.data from disk a row at a time: set task.data"):
        Config(task={"name": "arithmetic", "stream": True})
    with pytest.raises(ValueError, match="not with task.stream"):
        Config(task={"data": str(array), "eval_data": str(array), "stream": True}, curriculum={"filter": True})


@pytest.mark.parametrize("stream", [False, True])
def test_line_ends_and_encodings_users_files_have(tmp_path, stream):
    """Old Mac CSV exports end lines with a lone \\r; a quoted cell may hold a line break; a
    file that is not UTF-8 is an error naming its line and byte, streamed or not."""
    mac = tmp_path / "mac.csv"
    mac.write_bytes(b"prompt,answer\r2 + 2?,4\r\"two\r\nlines\",5\r")
    task = build_task(TaskConfig(data=str(mac), eval_data=str(mac), stream=stream))
    assert [s["prompt"] for s in task.train] == ["2 + 2?", "two\r\nlines"] and task.train[1]["id"] == "mac.csv:3"
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"prompt": "a", "answer": "1"}\n{"prompt": "caf\xe9", "answer": "2"}\n')
    with pytest.raises(TaskError, match=r"latin\.jsonl:2: not UTF-8 text \(invalid continuation byte at byte 46\)"):
        build_task(TaskConfig(data=str(latin), eval_data=str(latin), stream=stream))

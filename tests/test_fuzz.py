"""Bad input of every kind, generated (hypothesis): the config loader and its overrides, the
data loaders, and reward return values. Each input either works or gets the project's own
error naming what is at fault; never a bare traceback. Each test counts the inputs it tried."""

import json
import math
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aha.config import ConfigError, load_config
from aha.config.sections import RewardSpec
from aha.rewards import build_reward
from aha.tasks import TaskError, build_task
from aha.config.sections import TaskConfig

EXAMPLES = 1000
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.filter_too_much, HealthCheck.data_too_large])

# the keys users write, misspelled ones and nonsense
SECTIONS = ["task", "rollout", "train", "algorithm", "eval", "monitor", "tracking", "lora", "ray", "curriculum",
            "env", "sft", "dpo", "rm", "prm"]
KEYS = ["group_size", "prompts_per_step", "steps", "lr", "temperature", "temperatures", "advantage", "kl_coef",
        "name", "data", "max_turns", "options", "filter", "weighting", "stream", "force_continue", "clip_low",
        "clip_high", "epochs", "micro_batch_size", "resume", "seed", "scorer", "rank", "address", "fn", "weight"]
text = st.text(alphabet=string.printable + "é中\u2028\x00", max_size=30)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                    text, st.sampled_from(["grpo", "gae", "try_again", "inf", "-1", "1e-3", "[1, 2]", "{a: 1}"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.one_of(text, st.sampled_from(KEYS)), inner,
                                                                       max_size=4)), max_leaves=8)
keys = st.one_of(st.builds(lambda s, k: f"{s}.{k}", st.sampled_from(SECTIONS), st.sampled_from(KEYS)),
                 st.sampled_from(SECTIONS + ["method", "model", "reward", "seed", "output_dir"]), text)


def override(key: str, value) -> str:
    return f"{key}={json.dumps(value, allow_nan=True) if not isinstance(value, str) else value}"


def test_config_overrides_fuzzed():
    tried = []

    @FUZZ
    @given(st.lists(st.tuples(keys, values), min_size=1, max_size=4))
    def check(pairs):
        tried.append(1)
        try:
            load_config(None, [override(k, v) for k, v in pairs])
        except ConfigError as err:
            assert str(err).strip()

    check()
    assert len(tried) >= EXAMPLES


def test_config_files_fuzzed(tmp_path):
    tried = []
    path = tmp_path / "c.yaml"

    @FUZZ
    @given(st.one_of(st.dictionaries(keys, values, max_size=6).map(lambda d: json.dumps(d, allow_nan=True)),
                     st.text(max_size=200), st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
    def check(content):
        tried.append(1)
        path.write_text(content, encoding="utf-8", errors="surrogatepass")
        try:
            load_config(path)
        except ConfigError as err:
            assert str(err).strip()

    check()
    assert len(tried) >= EXAMPLES


cells = st.one_of(text, st.integers(), st.floats(), st.none(), st.booleans(),
                  st.lists(st.one_of(text, st.integers()), max_size=3),
                  st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system", "assistant", "bot"]),
                                                  "content": st.one_of(text, st.integers())}), max_size=3))
rows = st.lists(st.one_of(st.dictionaries(st.sampled_from(["prompt", "answer", "id", "tests", "q"]), cells, max_size=4),
                          cells), max_size=6)


def write_rows(path, fmt: str, value) -> None:
    if isinstance(value, bytes):
        path.write_bytes(value)
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in value))
    elif fmt == "json":
        path.write_text(json.dumps(value, allow_nan=True))
    elif fmt == "parquet":  # a table pyarrow can type; rows it cannot become random bytes
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            pq.write_table(pa.Table.from_pylist([r for r in value if isinstance(r, dict)]), path)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError, TypeError, OverflowError):
            path.write_bytes(json.dumps(value, default=str).encode())
    else:  # csv / tsv: a header of the first row's keys, then each row's values as text
        dicts = [r for r in value if isinstance(r, dict)]
        header = list(dicts[0]) if dicts else ["prompt"]
        sep = "\t" if fmt == "tsv" else ","
        lines = [sep.join(header)] + [sep.join(str(r.get(h, "")) for h in header) if isinstance(r, dict) else str(r)
                                      for r in value]
        path.write_text("\n".join(lines) + "\n")


# a .json array cannot be streamed (an error says so; tested in test_data_formats)
@pytest.mark.parametrize("fmt, stream", [(fmt, stream) for fmt in ("jsonl", "json", "csv", "tsv", "parquet")
                                         for stream in (False, True) if not (stream and fmt in ("json", "parquet"))])
def test_data_loaders_fuzzed(tmp_path, fmt, stream):
    tried = []
    path = tmp_path / f"data.{fmt}"

    @FUZZ
    @given(st.one_of(rows, st.binary(max_size=300)))
    def check(value):
        tried.append(1)
        write_rows(path, fmt, value)
        try:
            task = build_task(TaskConfig(data=str(path), eval_data=str(path), stream=stream))
            for sample in task.train:  # what loaded is usable: a prompt and an id each
                assert "prompt" in sample and str(sample["id"]).strip()
        except TaskError as err:
            assert "data." in str(err) or "task." in str(err), str(err)

    check()
    assert len(tried) >= EXAMPLES


returns = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(allow_nan=True),
                                 text, st.just(object())),
                       lambda inner: st.one_of(st.lists(inner, max_size=3),
                                               st.dictionaries(text, inner, max_size=5)), max_leaves=12)


def test_reward_return_values_fuzzed():
    """Whatever a reward function returns, a sample's score is a number or the sample is
    counted as failed; the composition never raises and never gives a NaN total."""
    tried = []

    queue = []
    reward = build_reward([RewardSpec(fn="numeric_answer"), RewardSpec(fn="numeric_answer", weight=0.5, name="user")])
    reward.components[1].fn = lambda completion, sample: queue.pop(0) if queue else None  # the user's function

    @FUZZ
    @given(st.lists(returns, min_size=1, max_size=4))
    def check(outputs):
        tried.append(1)
        queue[:] = list(outputs)
        samples = [{"id": str(i), "prompt": "q", "answer": "1"} for i in range(len(outputs))]
        result = reward.score(["1"] * len(outputs), samples)
        assert result.total.shape == (len(outputs),)
        for total, failed in zip(result.total.tolist(), result.failed.tolist()):
            assert math.isfinite(total) or failed

    check()
    assert len(tried) >= EXAMPLES

"""Bad input of every kind, generated (hypothesis): the config loader and its overrides, the
data loaders, and reward return values. Each input either works or gets the project's own
error naming what is at fault; never a bare traceback. Each test counts the inputs it tried."""

import json
import math
import string

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aha.config import ConfigError, load_config
from aha.config.sections import RewardSpec, TaskConfig
from aha.rewards import build_reward
from aha.tasks import TaskError, build_task

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
    if isinstance(value, bytes) and fmt == "datasets":  # a folder whose Arrow file is random bytes
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        path.mkdir()
        (path / "data-00000-of-00001.arrow").write_bytes(value)
        (path / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    elif isinstance(value, bytes):
        path.write_bytes(value)
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in value))
    elif fmt == "json":
        path.write_text(json.dumps(value, allow_nan=True))
    elif fmt == "datasets":  # a folder save_to_disk wrote; rows it cannot type leave a folder of junk
        import shutil

        from datasets import Dataset

        shutil.rmtree(path, ignore_errors=True)
        try:
            Dataset.from_list([r for r in value if isinstance(r, dict)]).save_to_disk(str(path))
        except Exception:  # noqa: BLE001 - whatever datasets refuses to type
            path.mkdir()
            (path / "dataset_info.json").write_text(json.dumps(value, default=str))
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
@pytest.mark.parametrize("fmt, stream", [(fmt, stream) for fmt in ("jsonl", "json", "csv", "tsv", "parquet", "datasets")
                                         for stream in (False, True) if not (stream and fmt == "json")])
def test_data_loaders_fuzzed(tmp_path, fmt, stream):
    tried = []
    path = tmp_path / (f"data.{fmt}" if fmt != "datasets" else "data")

    @FUZZ
    @given(st.one_of(rows, st.binary(max_size=300)))
    def check(value):
        tried.append(1)
        write_rows(path, fmt, value)
        try:
            task = build_task(TaskConfig(data=str(path), eval_data=str(path), stream=stream))
            for sample in task.train:  # what loaded is usable: a prompt and an id each
                assert "prompt" in sample and str(sample["id"]).strip()
        except TaskError as err:  # naming the file (and row) or the key at fault
            assert str(path) in str(err) or "task." in str(err), str(err)

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


# pieces of real chat templates (ChatML, Llama's and Gemma's refusals), broken Jinja and text
TEMPLATE_PIECES = [
    "{% for message in messages %}", "{% endfor %}", "{{ message['content'] }}", "{{ message.role }}",
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n",
    "{% if message['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}",
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must "
    "alternate user/assistant/user/assistant/...') }}{% endif %}",
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}", "{{ bos_token }}", "{{ eos_token }}",
    "{{ messages[3]['content'] }}", "{{ nothing.at_all }}", "{{ 1 / 0 }}", "{{ message['content'] | upper }}",
    "{{ message['content'][:0] }}", "{{", "}}", "{%", "%}", "{# a comment #}", "{% set x = 1 %}", "{{ x }}",
    "{{ messages | length }}", "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% endif %}",
    "{% for m in messages %}{% if m.role == 'assistant' %}{{ raise_exception('no assistant turns') }}{% endif %}"
    "{% endfor %}", "{{ messages[0]['content'] * 3 }}", "{% if true %}", "{% endif %}", "{% else %}",
]
templates = st.one_of(st.lists(st.one_of(st.sampled_from(TEMPLATE_PIECES), text), max_size=10).map("".join), text)
messages = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]), "content": text}),
                    max_size=3).map(lambda turns: turns + [{"role": "user", "content": "What is 2 + 2?"}])


def test_chat_templates_fuzzed():
    """Whatever a model's chat template is, the load-time check refuses it with a reason, or
    every prompt it is asked to write becomes token ids, or the prompt's sample is named in a
    TaskError (a template that rejects a system turn, say); a multi-turn bridge gets an
    EnvError. Never a Jinja traceback from inside a run."""
    from types import SimpleNamespace

    from aha.envs import EnvError
    from aha.envs.episodes import TurnBridge
    from aha.models.loading import chat_template_problem
    from aha.models.tiny import tiny_tokenizer
    from aha.tasks import encode_prompts

    tried, refused_at_load, written = [], [], []
    tokenizer = tiny_tokenizer()

    @FUZZ
    @given(templates, st.one_of(st.none(), text), st.lists(st.fixed_dictionaries({"prompt": text, "answer": text}),
                                                           max_size=2), st.one_of(text, messages))
    def check(template, system, shots, prompt):
        tried.append(1)
        tokenizer.chat_template = template
        problem = chat_template_problem(tokenizer)
        if problem is not None:
            refused_at_load.append(1)
            assert problem.strip()
            return
        task = SimpleNamespace(system_prompt=system, few_shot=shots)
        try:
            (ids,) = encode_prompts(tokenizer, task, [{"id": "s-7", "prompt": prompt}])
            assert ids and all(isinstance(i, int) for i in ids)
            written.append(1)
        except TaskError as err:
            assert str(err).startswith("sample 's-7': "), str(err)
        try:
            assert all(isinstance(i, int) for i in TurnBridge(tokenizer).ids("4, try again", stop_token=None))
        except EnvError as err:
            assert "chat template" in str(err)

    check()
    assert len(tried) >= EXAMPLES
    assert refused_at_load and written  # both outcomes were reached


MODEL_FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
               "generation_config.json", "special_tokens_map.json"]
# small values only: a config asking for a billion-wide layer would be a memory test, not a format one
config_values = st.one_of(st.none(), st.booleans(), st.integers(-3, 4096), st.floats(allow_nan=True), text,
                          st.lists(st.integers(-3, 64), max_size=3))
damages = st.one_of(
    st.tuples(st.just("delete"), st.sampled_from(MODEL_FILES), st.none()),
    st.tuples(st.just("truncate"), st.sampled_from(MODEL_FILES), st.floats(0, 0.999)),
    st.tuples(st.just("flip"), st.sampled_from(MODEL_FILES), st.lists(st.tuples(st.floats(0, 0.999),
                                                                              st.integers(0, 7)), min_size=1,
                                                                      max_size=4)),
    st.tuples(st.just("bytes"), st.sampled_from(MODEL_FILES), st.binary(max_size=200)),
    st.tuples(st.just("key"), st.sampled_from(["config.json", "tokenizer_config.json"]),
              st.tuples(st.sampled_from(["hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads",
                                         "num_key_value_heads", "intermediate_size", "model_type", "torch_dtype",
                                         "tie_word_embeddings", "rope_theta", "max_position_embeddings",
                                         "eos_token", "pad_token", "model_max_length", "tokenizer_class",
                                         "chat_template", "added_tokens_decoder", "architectures"]),
                        st.one_of(st.just("<deleted>"), config_values))),
)


def damage_folder(folder, damage) -> None:
    kind, name, how = damage
    path = folder / name
    if not path.exists():
        return
    if kind == "delete":
        path.unlink()
    elif kind == "truncate":
        path.write_bytes(path.read_bytes()[:int(how * path.stat().st_size)])
    elif kind == "flip":
        data = bytearray(path.read_bytes())
        for where, bit in how if data else ():
            data[int(where * len(data))] ^= 1 << bit
        path.write_bytes(bytes(data))
    elif kind == "bytes":
        path.write_bytes(how)
    else:
        key, value = how
        try:  # a key changed in a file an earlier damage left readable
            settings = json.loads(path.read_text())
        except ValueError:
            return
        if not isinstance(settings, dict):
            return
        if value == "<deleted>":
            settings.pop(key, None)
        else:
            settings[key] = value
        path.write_text(json.dumps(settings, allow_nan=True))


MODEL_EXAMPLES = 300


def test_model_folders_fuzzed(tmp_path):
    """A Hugging Face model folder damaged at random (a file deleted, cut short, bits flipped,
    replaced by bytes, a config or tokenizer key changed): it loads and runs a forward pass,
    or aha's ModelNotFound names the folder. A flipped bit inside a weight's value is a
    different model, which no folder format lets a loader tell; NaN and inf are refused."""
    import shutil

    from aha.models import load
    from aha.models.loading import ModelNotFound
    from aha.models.tiny import tiny_model, tiny_tokenizer

    pristine = tmp_path / "pristine"
    tokenizer = tiny_tokenizer()
    tiny_model(len(tokenizer)).save_pretrained(pristine)
    tokenizer.save_pretrained(pristine)
    tried, loaded, refused = [], [], []

    @settings(FUZZ, max_examples=MODEL_EXAMPLES)
    @given(st.lists(damages, min_size=1, max_size=3))
    def check(plan):
        tried.append(1)
        folder = tmp_path / "model"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(pristine, folder)
        for damage in plan:
            damage_folder(folder, damage)
        try:
            model = load(str(folder))
        except ModelNotFound as err:
            refused.append(1)
            assert str(folder) in str(err)
            return
        loaded.append(1)
        ids = model.tokenizer("What is 2 + 2?", return_tensors="pt")["input_ids"]
        logits = model.model(input_ids=ids).logits
        assert bool(torch.isfinite(logits).all())

    check()
    assert len(tried) >= MODEL_EXAMPLES
    assert loaded and refused


def test_reward_specs_fuzzed():
    """A config's reward list, generated: known and unknown functions, bad module paths,
    arguments the function does not take or takes with the wrong type, weights, gates and
    clips of every type, a reward model that is not there. Each is refused at load or build
    with an error naming reward[i], or it scores completions: a number or a failure each."""
    from aha.rewards import RewardError
    from aha.rewards.functions import SHORT_NAMES

    functions = [*SHORT_NAMES, "aha.rewards:numeric_answer", "nope_x:f", "aha.rewards:", ":f", "math:sqrt", "math:pi",
                 "aha.rewards:nothing_here", "no_file.py:f", "", "json:dumps", "aha.rewards:batched"]
    numbers = st.one_of(st.floats(-5, 5), st.floats(allow_nan=True), scalars)  # mostly numbers, as users write
    argument_names = ["rel_tol", "pattern", "max_chars", "reference_field", "tol", "x", "case_sensitive", "target",
                      "weights", "dtype"]
    spec = st.fixed_dictionaries(
        {"fn": st.one_of(st.sampled_from(functions), text.map(lambda t: "zz_" + t))},  # never a real module's name
        optional={"weight": numbers, "name": st.one_of(st.none(), text), "combine": st.sampled_from(
            ["sum", "product", "gate", "max"]), "gate_min": numbers, "clip_min": numbers, "clip_max": numbers,
            "args": st.dictionaries(st.sampled_from(argument_names), values, max_size=2),
            "model": st.sampled_from([None, "no/such/run"]), "workers": st.sampled_from([0, -1, "two"])})
    tried, scored = [], []
    samples = [{"id": "a", "prompt": "q", "answer": "2"}, {"id": "b", "prompt": "q", "answer": "x"}]

    @FUZZ
    @given(st.lists(spec, max_size=3))
    def check(specs):
        tried.append(1)
        try:
            config = load_config(None, ["reward=" + json.dumps(specs, allow_nan=True)])
        except ConfigError as err:
            assert "reward" in str(err), str(err)
            return
        try:
            reward = build_reward(config.reward)
        except RewardError as err:
            assert str(err).startswith("reward"), str(err)
            return
        result = reward.score(["The answer is 2", ""], samples)
        for total, failed in zip(result.total.tolist(), result.failed.tolist()):
            assert math.isfinite(total) or failed
        scored.append(1)

    check()
    print(f"reward specs: {len(tried)} tried, {len(scored)} built and scored")
    assert len(tried) >= EXAMPLES and scored


RUN_EXAMPLES = 300
metric_rows = st.lists(st.one_of(
    st.fixed_dictionaries({"step": st.one_of(st.integers(-2, 6), scalars)},
                          optional={"reward/mean": scalars, "eval/accuracy": scalars, "time/step_s": scalars,
                                    "groups/sampled": scalars, "kl": values}),
    st.fixed_dictionaries({"step": st.integers(0, 6), "epoch": st.one_of(st.integers(0, 3), scalars),
                           "id": st.one_of(text, st.integers(), scalars),
                           "right": st.one_of(st.integers(0, 8), scalars),
                           "tried": st.one_of(st.integers(0, 8), scalars)}),
    values), max_size=8)


def test_run_folders_fuzzed(tmp_path, capsys):
    """The commands that read a run folder (`aha report`, `aha select`) on folders whose
    metrics.jsonl, groups.jsonl, samples.jsonl, config.yaml and monitor.json are generated junk, half-good
    lines or random bytes: each succeeds or exits 2 with `aha: error:` naming what is at
    fault; never a traceback."""
    from aha.cli import main

    run, tried, outcomes = tmp_path / "run", [], {0: 0, 2: 0}
    files = ["metrics.jsonl", "groups.jsonl", "samples.jsonl"]

    good = st.lists(st.fixed_dictionaries({"step": st.integers(0, 6), "reward/mean": st.floats(0, 1),
                                           "eval/accuracy": st.floats(0, 1)}), min_size=1, max_size=4)
    good_config = "model: tiny\ntask: {name: arithmetic, num_eval: 4}\n"

    @settings(FUZZ, max_examples=RUN_EXAMPLES)
    @given(st.fixed_dictionaries({name: st.one_of(st.none(), st.binary(max_size=100), metric_rows, good)
                                  for name in files}),
           st.one_of(st.none(), st.just(good_config), st.just(good_config), text,
                     st.dictionaries(st.sampled_from(["model", "task", "train", "algorithm", "reward", "eval"]), values,
                                     max_size=4).map(lambda d: json.dumps(d, allow_nan=True))),
           st.sampled_from(["report", "select"]),
           st.one_of(st.none(), values, st.fixed_dictionaries({"flags": st.dictionaries(text, values, max_size=2)})))
    def check(contents, config, command, monitor):
        tried.append(1)
        import shutil

        shutil.rmtree(run, ignore_errors=True)
        run.mkdir()
        for name, content in contents.items():
            if isinstance(content, bytes):
                (run / name).write_bytes(content)
            elif content is not None:
                (run / name).write_text("".join(json.dumps(row, allow_nan=True) + "\n" for row in content))
        if config is not None:
            (run / "config.yaml").write_text(config)
        if monitor is not None:
            (run / "monitor.json").write_text(json.dumps(monitor, allow_nan=True))
        argv = [command, str(run)] + (["--out", str(tmp_path / "selected.jsonl")] if command == "select" else [])
        code = main(argv)
        err = capsys.readouterr().err
        assert code in (0, 2), (code, err)
        if code == 2:
            assert "aha: error: " in err and err.strip().count("\n") == 0, err
        outcomes[code] += 1

    check()
    assert len(tried) >= RUN_EXAMPLES and all(outcomes.values()), outcomes

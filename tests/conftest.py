import os

# Nothing may come from a model hub in tests.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# rollout.engine=auto would pick vLLM wherever `make vllm` made .venv-vllm, and start a worker
# in every test: the suite samples with the HF engine; tests/test_vllm.py asks for vLLM itself
from aha.rollout.vllm_engine import vllm_python  # noqa: E402

VLLM_PYTHON = vllm_python(None)
os.environ["AHA_VLLM_PYTHON"] = ""


import json
import re
import shutil
import subprocess

import pytest

CHROMIUM = ["--headless", "--no-sandbox", "--disable-gpu"]


@pytest.fixture
def browser():
    """Opens a page in Debian's headless Chromium (`make test` installs it) and returns
    [alt, naturalWidth, naturalHeight] for every image once the page has loaded (0 x 0
    for an image the browser could not decode), and the number of distinct colours in a
    screenshot (a blank page has a handful)."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (make test installs it)")

    def open_page(path, tmp_path, height=1600):
        probe = ("<script>addEventListener('load', () => { const p = document.createElement('pre'); p.id = 'probe';"
                 " p.textContent = JSON.stringify([...document.images].map(i => [i.alt, i.naturalWidth, "
                 "i.naturalHeight]));"
                 " document.body.appendChild(p); });</script>")
        probed = tmp_path / "probe.html"
        probed.write_text(path.read_text(encoding="utf-8").replace("</body>", probe + "</body>"), encoding="utf-8")
        dom = subprocess.run([chromium, *CHROMIUM, "--dump-dom", probed.as_uri()],
                             capture_output=True, text=True, timeout=120).stdout
        images = json.loads(re.search(r'<pre id="probe">(.*?)</pre>', dom).group(1))
        shot = tmp_path / "shot.png"
        subprocess.run([chromium, *CHROMIUM, f"--screenshot={shot}", f"--window-size=1200,{height}", path.as_uri()],
                       capture_output=True, timeout=120)
        from PIL import Image

        pixels = Image.open(shot).convert("RGB")
        assert pixels.size == (1200, height)
        return images, len(pixels.getcolors(1 << 20))

    return open_page


SCORED_RUN = """
model: tiny
output_dir: {run}
task: {{name: arithmetic, num_eval: {num_eval}}}
rollout: {{prompts_per_step: 2, group_size: 4, max_new_tokens: 5, batch_size: 32}}
train: {{steps: 2, lr: 1.0e-2, checkpoint_every: 2, report: {report}}}
algorithm: {{dynamic_sampling: false}}
reward: [{{fn: '{scorer}:has_a'}}]
eval: {{before: false, after: false, scorer: '{scorer}:has_a'}}
"""


@pytest.fixture
def scored_run(tmp_path):
    """train_scored(num_eval, report) -> (config path, checkpoint): a tiny run of 2 steps whose
    scorer ('a' in the completion) the random tiny model sometimes satisfies."""
    def train_scored(num_eval: int, report: bool = True):
        from aha.config import load_config
        from aha.training.loop import train

        scorer = tmp_path / "score.py"
        # has_digit: for voting tests, a scorer whose right samples always have an answer voting can read
        scorer.write_text("def has_a(completion, sample):\n    return float('a' in completion.lower())\n"
                          "def has_digit(completion, sample):\n    return float(any(c in '0123456789' for c in "
                          "completion))\n")
        path = tmp_path / "eval.yaml"
        path.write_text(SCORED_RUN.format(run=tmp_path / "run", scorer=scorer, num_eval=num_eval,
                                          report=str(report).lower()))
        train(load_config(path), echo=lambda *_: None)
        return path, tmp_path / "run/checkpoints/step-2"

    return train_scored

"""Every relative link in the README and docs/ reaches a file: a page that moved (a measured
result moved to docs/findings/) leaves no dead link behind."""

import re
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_every_relative_link_in_the_docs_resolves():
    dead = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links
        for match in re.finditer(r"\]\(([^)\s]+)\)", text):
            target = match.group(1).split("#")[0]
            if target and not re.match(r"[a-z]+:", target) and not (page.parent / target).exists():
                dead.append(f"{page.relative_to(ROOT)}: {match.group(1)}")
    assert not dead, "dead links:\n" + "\n".join(dead)

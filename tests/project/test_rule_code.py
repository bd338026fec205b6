"""Every rule carries the hash of the code it runs, so an edit re-runs what it changes."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def rules() -> dict[str, str]:
    """Each rule's text, by name, from workflow/rules/*.smk."""
    found = {}
    for path in sorted((REPO / "workflow" / "rules").glob("*.smk")):
        for block in re.split(r"(?m)^(?=rule )", path.read_text())[1:]:
            found[re.match(r"rule (\w+):", block).group(1)] = block
    return found


def test_every_rule_that_runs_code_carries_its_code_hash():
    checked = 0
    for name, text in rules().items():
        script = re.search(r'script:\n\s+"\.\./scripts/(\w+)\.py"', text)
        if script:
            # The hash of what its own script imports: another script's would miss an edit.
            assert f'code=script_code("{script.group(1)}")' in text, name
            checked += 1
        elif "shell:" in text:
            assert re.search(r"code=code_hash\(", text), name
    assert checked >= 20

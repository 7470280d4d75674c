"""The README's Python examples run as written, in order, and its prose about the output holds."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).parent.parent / "README.md"


def test_readme_python_examples_run_and_show_what_the_prose_says(capsys, tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert len(blocks) == 4, (
        "README holds the one-screen example, 'Your own intervention', the attention viewer "
        "and the screened sweep"
    )
    namespace: dict = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    out = capsys.readouterr().out
    effects = {
        head: float(effect)
        for effect, head in re.findall(r"([+-]\d+\.\d+) logits  (L\dH\d) output \(z\)", out)
    }
    assert len(effects) == 8
    # "a drop of about 10 logits for L0H2", "1.3 to 1.5 logits" for the layer-1 heads
    assert effects["L0H2"] < -8
    assert all(-2.5 < effects[f"L1H{h}"] < -0.5 for h in range(4))
    # "Your own intervention" runs on the model and task of the first example
    from interv.engine import protocol

    try:
        exec(compile(blocks[1], str(README), "exec"), namespace)
    finally:
        protocol._KINDS.pop("interpolate", None)
    result = namespace["result"]
    assert result.n_interventions == 4 and "moved 0.5 of the way" in result.descriptions[0]
    # the attention viewer, on the same model and task, writes its files where it is run
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[2], str(README), "exec"), namespace)
    assert namespace["viewer"].view.head_labels == ("L0H2", "L1H0")
    assert (tmp_path / "attention.html").stat().st_size > 10_000
    assert (tmp_path / "attention.png").read_bytes()[:4] == b"\x89PNG"
    # the screened sweep: what the prose says about its audit and the site it missed
    exec(compile(blocks[3], str(README), "exec"), namespace)
    printed = capsys.readouterr().out
    screened, each = namespace["screened"], namespace["each"]
    audit = screened.screens[0].audit
    assert "56 of 176 left as estimates" in printed
    assert (audit.n_verified, int(audit.audited.numel()), audit.looks) == (60, 60, 12)
    assert "miss rate <= 0.0487" in printed and "stopped by bound" in printed
    assert "over the 120 checked 0.50 [0.27, 0.72]" in printed
    full = interv_run(namespace, each)
    exact_top = full.effect.mean(-1).abs().argsort(descending=True)[:5].tolist()
    assert sorted(exact_top) == sorted(audit.top(5).tolist())  # "the exact top-5"


def interv_run(namespace: dict, interventions: list):
    """The full exact sweep of the README's screened example."""
    return namespace["interv"].run(namespace["model"], namespace["task"], interventions)

"""Notebook 04 · Weights vs values — solutions, with the working.

Each solution runs in the notebook's kernel after its cells (the names are the notebook's);
``tests/test_notebooks.py`` runs it there and checks every answer, every equivalent form in
``FORMS`` and the rejection of every sign flip in ``SIGNED``.
"""

# Exercise 1. The first ablation table of the value-vector section: the sink-heavy head with
# the largest |zero-ablation effect| is the one that section then edits.
chosen = sinky_heads[int(whole.abs().argmax())]
answer_1 = f"L{chosen[0]}H{chosen[1]}"

# Exercise 2. One run: double the values at the sink only. Zeroing them barely mattered because
# the sink's value vectors write much the same thing on every prompt; doubling them adds that
# same vector again, scaled by the sink's large weight, so the head's output moves further from
# anything it writes in the clean run: the effect can be larger than zeroing's, although the
# content keys, which carry the task, are untouched. Value norms and mass alone do not say.
doubled_run = interv.run(
    model, task, [interv.ValueScale(*chosen, key_positions=(0,), factor=2.0)], progress=False
)
answer_2 = float((doubled_run.values - doubled_run.clean).mean())

# Exercise 3. The difference column of the DirectEffect table: the last-layer head, whose
# removal moves the final norm's scale most.
gaps_3 = [abs(float(direct[w]) - float(v)) for w, v in zip(writers, frozen_effect, strict=True)]
widest_3 = writers[max(range(len(writers)), key=gaps_3.__getitem__)]
answer_3 = f"L{widest_3[0]}H{widest_3[1]}"

FORMS = {"1": [chosen, answer_1.lower()], "2": [round(answer_2, 2)], "3": [list(widest_3)]}
SIGNED = ["2"]

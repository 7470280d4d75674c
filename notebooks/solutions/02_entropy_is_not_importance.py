"""Notebook 02 · Entropy is not importance — solutions, with the working.

Each solution runs in the notebook's kernel after its cells (the names are the notebook's);
``tests/test_notebooks.py`` runs it there and checks every answer, every equivalent form in
``FORMS`` and the rejection of every sign flip in ``SIGNED``.
"""

# Exercise 1. One run, one intervention; the effect is the ablated metric minus the clean one,
# per prompt, then the mean. L0H2 loses only part of its effect: it is a previous-token head,
# its mean output over prompts is not the information the induction heads need (which token
# came before *this* occurrence), so removing what varies between prompts still removes
# nearly everything that matters. Zero ablation additionally feeds the next layer a vector L0H2
# never writes; the gap between the two is that artefact's size.
mean_l0h2 = interv.run(
    zoo, task, [interv.MeanAblation(0, 2, reference="clean")], metric="logit_diff", progress=False
)
answer_1 = float((mean_l0h2.values - mean_l0h2.clean).mean())

# Exercise 2. Sort the heads by |effect| and look up the first one's position in the
# concentration ranking (`rank`, 1 = most concentrated): the head that matters most is far
# from the most concentrated ones.
answer_2 = rank[max(range(len(smol_heads)), key=lambda i: abs(effects[i]))]

# Exercise 3. A head keeps its effect when the mean-ablation effect has the zero-ablation
# effect's sign and at least half its size. L1H5 goes from about -1.4 to about +0.9: larger
# than half in size, but reversed, so it keeps nothing.
answer_3 = sum(
    1
    for i, m in zip(top_zero, mean_effects.tolist(), strict=True)
    if m * float(effects[i]) > 0 and abs(m) >= abs(float(effects[i])) / 2
)

FORMS = {"1": [round(answer_1, 2)], "2": [float(answer_2)], "3": [float(answer_3)]}
SIGNED = ["1"]

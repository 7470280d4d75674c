"""Notebook 08 · Claims checked — solutions, with the working.

Each solution runs in the notebook's kernel after its cells (the names are the notebook's);
``tests/test_notebooks.py`` runs it there and checks every answer, every equivalent form in
``FORMS`` and the rejection of every sign flip in ``SIGNED``.
"""

# Exercise 1. Claim 6's table, SmolLM2, random tokens.
answer_1 = results["sinks_smollm2-135m"]["inputs"]["random"]["rate"]

# Exercise 2. From the perplexities, not the losses: (111.9 - 41.4) / (111.9 - 35.8), about
# 0.93 on the shipped results. The loss share for the first 2 tokens is (1.140 - 0.145) /
# 1.140, about 0.87: perplexity is exp(loss), so the same gap is a larger share in perplexity
# units. Which share a paper quotes changes how good "window + sink" looks.
rows_2 = stream["variants"]["with_bos"]["conditions"]
answer_2 = (rows_2["window"]["perplexity"] - rows_2["window_sinks_2"]["perplexity"]) / (
    rows_2["window"]["perplexity"] - rows_2["full"]["perplexity"]
)

# Exercise 3. Claim 7's norm column for [CLS] + [SEP], counted per layer.
answer_3 = sum(1 for v in norms["groups"]["cls_sep"]["norm"]["per_layer"] if v < 0.1)

FORMS = {"1": [round(answer_1, 2)], "2": [round(answer_2, 2)], "3": [float(answer_3)]}
SIGNED = ["1", "2"]

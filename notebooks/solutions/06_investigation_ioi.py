"""Notebook 06 · An investigation: IOI in SmolLM2-135M — solutions, with the working.

Each solution runs in the notebook's kernel after its cells (the names are the notebook's);
``tests/test_notebooks.py`` runs it there and checks every answer, every equivalent form in
``FORMS`` and the rejection of every sign flip in ``SIGNED``.
"""

# Exercise 1. The layer scan: the layer whose attention output, denoised, restores the most.
# The scan's index counts the layers scanned (`SCAN_LAYERS`, from layer 10 by default).
answer_1 = SCAN_LAYERS[int(scan.mean_recovery().argmax())]

# Exercise 2. Section 4's first line: the head whose denoised output restores the most.
best = head_patches[int(recovery.argmax())]
answer_2 = f"L{best.layer}H{best.head}"

# Exercise 3. Compare every head's mean sink mass with 0.5 and average the booleans. Compare
# it with section 1's mean sink mass: a mean near a half can come from many heads parked on the
# sink and many that are not, which is what this share shows.
answer_3 = float((sink_mass > 0.5).double().mean())

FORMS = {"1": [float(answer_1)], "2": [(best.layer, best.head)], "3": [round(answer_3, 2)]}
SIGNED = ["3"]

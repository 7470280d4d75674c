"""Notebook 03 · Intervention semantics — solutions, with the working.

Each solution runs in the notebook's kernel after its cells (the names are the notebook's);
``tests/test_notebooks.py`` runs it there and checks every answer, every equivalent form in
``FORMS`` and the rejection of every sign flip in ``SIGNED``.
"""

# Exercise 1. Noising copies L0H2's activation from the clean prompt's own corrupted partner:
# the same random symbols, with only the first occurrence of the answer destroyed. L0H2 is a
# previous-token head, so on the partner it still writes "the token before me" correctly at
# every position but the corrupted one. Resampling draws a random corrupted prompt: different
# symbols at every position, so L0H2's output is wrong everywhere, and the induction heads
# downstream read more wrong information. Same head, same "corrupted" label, different
# amounts of information removed: the resample effect is larger in size.
answer_1 = "noising"

# Exercise 2. The denoising column of the patching table, row L0H2: about 0. L0H2 is
# necessary but not sufficient: its clean output alone does not help induction heads that
# still see the corrupted prompt.
answer_2 = float(recovery[0, heads.index((0, 2))])

# Exercise 3. Compare |resample| with |zero| head by head in the first table.
answer_3 = int((effects[2].abs() > effects[0].abs()).sum())

FORMS = {"1": ["Noising", " noising "], "2": [round(answer_2, 2)], "3": [float(answer_3)]}
SIGNED = []

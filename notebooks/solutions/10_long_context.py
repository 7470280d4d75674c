"""Notebook 10 · Long context — solutions, with the working.

Each solution runs in the notebook's kernel after its cells (the names are the notebook's);
``tests/test_notebooks.py`` runs it there and checks every answer, every equivalent form in
``FORMS`` and the rejection of every sign flip in ``SIGNED``.
"""

import math

# Exercise 1. Uniform over the 32 admitted keys: H = log 32. The naive normalization divides
# by log 1024 (every position up to the query): log 32 / log 1024 = 5 / 10 = 0.500. interv
# divides by log n = log 32 and reads 1.000: as spread as the mask allows.
answer_1 = math.log(32) / math.log(1024)

# Exercise 2. exp(loss_window - loss_full) = exp(4.636 - 3.491), about 3.1: the window alone
# triples the perplexity.
answer_2 = math.exp(loss.mean(0) - loss.mean())

# Exercise 3. (4.636 - 3.722) / (4.636 - 3.491), about 0.8: four tokens of sink restore most of
# what the window lost.
answer_3 = (loss.mean(0) - loss.mean(1)) / (loss.mean(0) - loss.mean())

FORMS = {"1": [0.5, 0.500], "2": [round(answer_2, 2)], "3": [round(answer_3, 2)]}
SIGNED = ["1", "2", "3"]

"""Notebook 01 · Concentration — solutions, with the working.

Each solution runs in the notebook's kernel after its cells (the names are the notebook's);
``tests/test_notebooks.py`` runs it there and checks every answer, every equivalent form in
``FORMS`` and the rejection of every sign flip in ``SIGNED``.
"""

import math

# Exercise 1. The window of 3 admits keys 5, 6, 7 for query 7, so n = 3.
# H = 0.5 log 2 + 2 * 0.25 log 4 = 1.5 log 2 = 1.0397 nats, and H / log 3 = 0.946: nearly
# uniform over what the query may see. With the causal mask alone n = 8 and the same row
# reads 1.0397 / log 8 = 0.500: *more* concentrated-looking, for a reason that is only the
# normalization.
answer_1 = 1.5 * math.log(2) / math.log(3)

# Exercise 2. H = -(0.7 log 0.7 + 3 * 0.1 log 0.1) = 0.2497 + 0.6908 = 0.9404 nats;
# H / log 4 = 0.678.
answer_2 = -(0.7 * math.log(0.7) + 3 * 0.1 * math.log(0.1)) / math.log(4)

# Exercise 3. Without the sink the content weights are (0.2, 0.2); renormalized, q = (0.5, 0.5),
# so H(q) = log 2 = 0.693 nats, whatever the sink's mass.
answer_3 = math.log(2)

FORMS = {"1": [0.946, round(answer_1, 3)], "3": [0.693]}
SIGNED = ["1", "2", "3"]

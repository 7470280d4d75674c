"""Notebook 05 · Sinks as compositions — solutions, with the working.

Each solution runs in the notebook's kernel after its cells (the names are the notebook's);
``tests/test_notebooks.py`` runs it there and checks every answer, every equivalent form in
``FORMS`` and the rejection of every sign flip in ``SIGNED``.
"""

import math

# Exercise 1. The sink-lm-3l section prints the sink share of the mean change with its
# interval: most of that model's entropy collapse is mass moving onto <bos>.
answer_1 = sink_model.overall["sink_share"]

# Exercise 2. Keep-sink cosine is dominated by the sink weight (A has 0.70 there), so D gets
# an even larger sink weight to be closer to A than B is; drop-sink compares only the content,
# renormalized, so D's content must point away from A's (A reads key 1 most): put D's content
# on key 3. With D = [0.9, 0.0, 0.0, 0.1]: keep-sink cos(A, D) = 0.9587 > cos(A, B) = 0.9579
# (the shared sink weight dominates both), drop-sink cos(A, D) = 0.236 < cos(A, B) = 0.500.
# The same row is "closer" or "farther" depending only on whether the sink is compared.
answer_2 = [0.9, 0.0, 0.0, 0.1]

# Exercise 3. The heavy-sink row's content weights (0.1, 0.05, 0.05), renormalized, are
# q = (0.5, 0.25, 0.25), the light-sink row's q: H(q) = 0.5 log 2 + 0.5 log 4 = 1.0397 nats.
answer_3 = 1.5 * math.log(2)

FORMS = {
    "1": [round(answer_1, 2)],
    "2": [(0.9, 0.0, 0.0, 0.1), [0.85, 0.0, 0.05, 0.1]],
    "3": [1.04],
}
SIGNED = ["1", "3"]

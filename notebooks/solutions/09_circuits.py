"""Notebook 09 · Circuits — solutions, with the working.

Each solution runs in the notebook's kernel after its cells (the names are the notebook's);
``tests/test_notebooks.py`` runs it there and checks every answer, every equivalent form in
``FORMS`` and the rejection of every sign flip in ``SIGNED``.
"""

# Exercise 1. Sort the 81 exact effects by size; the largest is the token embeddings into a
# layer-0 head's values (notebooks 03 and 07 follow that head, L0H1).
answer_1 = graph.edges[int(exact.abs().argmax())].label

# Exercise 2. More interpolation steps follow the path from clean to corrupted more closely;
# whether that raises the recall of the top 10 is an empirical question: compute it.
answer_2 = recall(edge_scores(zoo, task, method="eap-ig", steps=20).scores)

# Exercise 3. The mission link lists every head that sends or receives a circuit edge.
answer_3 = len(smol_link.circuit_heads)

FORMS = {"2": [round(answer_2, 2)], "3": [float(answer_3)]}
SIGNED = []

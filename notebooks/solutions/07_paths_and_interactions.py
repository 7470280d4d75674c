"""Notebook 07 · Paths and interactions — solutions, with the working.

Each solution runs in the notebook's kernel after its cells (the names are the notebook's);
``tests/test_notebooks.py`` runs it there and checks every answer, every equivalent form in
``FORMS`` and the rejection of every sign flip in ``SIGNED``.
"""

# Exercise 1. One path patch: L0H1's output from the corrupted run, only along its path into
# the four induction heads' value inputs. The induction heads copy what their values carry at
# the position they attend to, so a head that writes token identity into the values matters
# there even if it plays no part in *where* they look (the key path).
values_run = interv.run(zoo, task, [interv.PathPatch(0, 1, induction, "v")], progress=False)
answer_1 = float(values_run.mean()[0] - values_run.clean.mean())

# Exercise 2. The SmolLM2 table's total-effect column, largest in size.
strongest_2 = heads[int((result.mean() - result.clean.mean())[: len(heads)].abs().argmax())]
answer_2 = f"L{strongest_2[0]}H{strongest_2[1]}"

# Exercise 3. The interaction design's last line.
answer_3 = len(found.compensation)

FORMS = {"1": [round(answer_1, 1)], "2": [strongest_2], "3": [float(answer_3)]}
SIGNED = ["1"]

"""Notebook 11 · Two models, the same questions — solutions, with the working.

Each solution runs in the notebook's kernel after its cells (the names are the notebook's);
``tests/test_notebooks.py`` runs it there and checks every answer, every equivalent form in
``FORMS`` and the rejection of every sign flip in ``SIGNED``.
"""

# Exercise 1. The table's second row: sink-lm-3l's rho is positive, its interval above 0.
answer_1 = "sink-lm-3l"

# Exercise 2. Layer 1's four heads are the induction heads: they share the work, so each
# one's ablation costs a similar, small amount, and their sink masses differ by little. The
# sign over 8 heads came mostly from the difference *between* layers (layer-0 heads park
# more and matter less); within a layer, with 4 heads, the rank correlation can take any
# sign, and an interval over 4 heads would be too wide to read.
induction = interv.load_model("induction-2l")
held_out = zoo.held_out_batch("induction-2l", n_sequences=32).tokens
sink_l1 = interv.concentration(induction, held_out, progress=False).sink_mass[:, 1]
loss_l1 = text_loss(
    induction, held_out, [interv.ZeroAblation(1, h) for h in range(4)], first_position=1
)
answer_2 = float(
    spearman(sink_l1.nanmean(-1).mean(0), (loss_l1.values - loss_l1.clean).mean(-1).abs())
)

# Exercise 3. Gemma's interval, [-0.42, +0.10], contains 0: on these 12 heads and 8 chunks the
# sign of the relation is not established, whatever the point estimate (-0.20) suggests. (With
# 16-token chunks the interval ended just below 0: a sign that moves with the chunks is not one
# to report.)
answer_3 = "undecided"

FORMS = {
    "1": ["Sink-LM-3L", "sink_lm_3l"],
    "2": [round(answer_2, 2)],
    "3": ["Undecided", "UNDECIDED"],
}
SIGNED = []

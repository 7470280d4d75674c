import sys, nbformat
from nbclient import NotebookClient
nb = nbformat.read("/work/wt/claims2/notebooks/08_claims_checked.ipynb", as_version=4)
NotebookClient(nb, timeout=600, kernel_name="python3").execute()
for c in nb.cells:
    if c.cell_type == "code" and "TWO_MODEL_TABLE" in c.source:
        for o in c.outputs: print(o.get("text", o))

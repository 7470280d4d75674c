"""Word lists shipped with the built-in tasks (read by :mod:`interv.tasks.builtin`).

- ``ioi_names.json``: first names grouped into name sets (``"female"``, ``"male"``);
  each name, with a leading space, is one token in SmolLM2's tokenizer.
- ``capitals.json``: ``[country, capital]`` pairs; every capital, with a leading
  space, is one token in SmolLM2's tokenizer, and every country is one token there
  too, so "The capital of {country} is" has the same token length for all of them.

``tests/test_tasks_real.py`` checks both claims against the real tokenizer.
"""

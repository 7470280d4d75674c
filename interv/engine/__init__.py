"""The intervention engine: declarative interventions, target metrics, one runner.

- :mod:`interv.engine.sites`: component names -> transformer-lens hook names, and
  validation of layers, heads and positions against a model's config.
- :mod:`interv.engine.interventions`: frozen intervention values that describe their
  own semantics in one sentence.
- :mod:`interv.engine.targets`: target metrics read at the answer position.
- :mod:`interv.engine.hooks`: turns an intervention into hook functions.
- :mod:`interv.engine.runner`: :func:`~interv.engine.runner.run`, the one effectful
  entry point (forwards, hooks, batching).
- :mod:`interv.engine._suffix`: the fast path of the runner: records each block's inputs
  in the base runs, then runs only the blocks from an intervention's earliest layer on,
  with the final norm and unembedding at the answer positions only.
- :mod:`interv.engine.attribution`: attribution patching, a first-order approximation
  of head patching (one forward and one backward), for screening only.
- :mod:`interv.engine.results`: the typed result of a run.
"""

"""The model layer: duration and memory models behind one registry.

Modules, lowest first; each imports only modules above it in this list (and ``desched``'s
core: errors, settings, trace, swf), never one below it:

- ``gbm``: LightGBM, imported without scikit-learn (which it would import for classes
  desched does not use).
- ``interfaces``: what a consumer needs of a loaded model (``DurationPredictor``,
  ``MemoryPredictor``). The live service depends on these protocols only.
- ``cards``: the typed records a registry stores (one card per version) and lists.
- ``registry``: the read side: versions, cards, the champion pointer, checksummed files.
- ``features``: the duration model's features, the same for training and prediction.
- ``duration``, ``memory``: the predictor runtimes, loading a champion from the read side.
- ``loading``: a registry's champion as an ``interfaces`` protocol (what the service calls).
- ``training``, ``memory_training``: fitting the two models on traces and completion records.
- ``promotion``: the write side: register a trained model as a version, apply its kind's
  promotion rule, move the champion pointer.

Trained artifacts live outside the code, under ``models/`` (models/README.md). Nothing here
imports Prefect, the service or the enrichment workers; lightgbm, lleaves and duckdb are
imported inside the functions that use them.
"""

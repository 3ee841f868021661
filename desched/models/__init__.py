"""The model layer: duration and memory models behind one registry.

``interfaces`` holds what a consumer (the live scheduler, the simulator's predictions) needs
of a loaded model; consumers depend on those protocols, never on how a model is trained or
on the enrichment workers that produce memory records.
"""

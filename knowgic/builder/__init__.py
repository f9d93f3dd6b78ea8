"""``knowgic build``: the ThinkEval graph builder (a model-specific KnowGIC version from the model's own
chain of thought). One module per stage; :mod:`knowgic.builder.pipeline` draws the flow."""

"""RippleEdits' six criteria on KnowGIC's graphs: relation semantics and the test queries of an edit.

::

    spec/relations.yaml ──knowgic.ripple.relations.read_relations──> RelationTable (template -> Relation)
    graph facts (subject, template, object) + aliases + an edit (e, r, o -> o*)
        ──knowgic.ripple.queries.edit_queries──> Query per criterion (LG, CI, CII, SA, PV, RS), each with
                                                 its condition facts, prompt, question, target, aliases
        ──knowgic.ripple.queries.query_row──> a row of a dataset version's ``ripple`` config

Pure: nothing here reads a model or a dataset folder; :mod:`knowgic.dataset.build` feeds it a version's
facts and edits.
"""

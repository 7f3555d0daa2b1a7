"""The question set: templates over generated data, asked with every bench server connected.

See ``core`` (templates, cases, checkers, the split). The runner is
``python -m bench.questions``.
"""

"""The book's own build and test tools: the notebook runner, the browser check of the built
book, student copies and workshop schedules. Only `make`, the tests and the workshop guide
use them; the notebooks import the reader's package, `tritonbook`.
"""

"""Sphinx extension: write each script only once per page.

Jupyter Book 1.0.4's sphinx-thebe 0.3.1 and sphinx-togglebutton add inline scripts with
``app.add_js_file(None, body=...)`` after the HTML builder has started. Sphinx 7.4 then
holds each of them twice, once with the file name ``None`` (the builder's copy) and once
with ``''`` (the registry's copy), so the two do not compare equal and both are written.
In the browser the second ``const THEBE_JS_URL`` throws "Identifier 'THEBE_JS_URL' has
already been declared" on every page. This drops the repeats as each page is written.
"""


def _script_key(script):
    return (script.filename or None, script.priority, tuple(sorted(script.attributes.items())))


def drop_repeated_scripts(app, pagename, templatename, context, doctree):
    seen, unique = set(), []
    for script in context.get("script_files", []):
        key = _script_key(script)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    context["script_files"][:] = unique


def setup(app):
    app.connect("html-page-context", drop_repeated_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

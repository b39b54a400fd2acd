"""Sphinx's configuration for ``make html`` (:mod:`lib.make.site.build` passes this folder as Sphinx's
configuration directory; the pages themselves are written under ``build/`` by :mod:`lib.make.site.pages`).

The stack is Jupyter Book 1's: MyST-NB reads the committed executed notebooks without running them
(``nb_execution_mode = "off"``: the book's own re-run hash decides what runs, ``make book``), the book theme
lays out the pages (a contents sidebar, an on-page contents, search, light and dark themes, a layout that
folds on a phone), sphinx-togglebutton folds code, and sphinx-mathjax-offline serves MathJax from the site
itself. Nothing is fetched from the network, when building or when reading.
"""

import os

project = "Prefill and Decode"
author = "the book's authors"
copyright = "the book's authors"  # noqa: A001 (Sphinx's name)
language = "en"

extensions = ["myst_nb", "sphinx_togglebutton", "sphinx-mathjax-offline"]

# The executed notebooks are the build's (make book); the site shows them as they are.
nb_execution_mode = "off"
nb_merge_streams = True
nb_ipywidgets_js = {}  # no widget state is published, so no widget scripts (they come from CDNs)
nb_render_markdown_format = "myst"  # the markdown a chapter's code displays: tables, <details>, maths
nb_code_prompt_show = "Show the code"
nb_code_prompt_hide = "Hide the code"
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]  # a takeaway that starts at ### under a chapter's ## is fine

# MathJax from the site's own _static/mathjax/ (sphinx-mathjax-offline sets mathjax_path); its context
# menu stays off, so its speech explorer never asks for the rule files it would otherwise fetch.
mathjax3_config = {"options": {"enableMenu": False}}

exclude_patterns = ["downloads/**", "_fragments/**", "_class/**", ".doctrees/**"]
html_theme = "sphinx_book_theme"
html_title = "Prefill and Decode"
html_static_path = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")]
html_css_files = ["book.css"]
html_copy_source = False  # the downloads are each chapter's own files, linked on its page
html_show_sourcelink = False
html_last_updated_fmt = None
html_theme_options = {
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "show_toc_level": 2,
    "use_download_button": False,  # it would offer the site's working copy; the page links the book's files
    "use_fullscreen_button": False,
    "use_repository_button": False,
    "navigation_with_keys": False,
    "launch_buttons": {},
    "logo": {"text": "Prefill and Decode"},
    "navbar_persistent": [],  # search is in the sidebar and the page's header already
}
html_context = {"default_mode": "auto"}  # light or dark as the reader's system says; a button switches

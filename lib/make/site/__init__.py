"""The published site (``make html``): ``build`` writes Sphinx's sources and runs Sphinx (``conf.py``, MyST-NB
with execution off and the book theme), ``chapters`` reads the executed chapters, ``pages`` writes the pages'
sources and ``linkcheck`` checks the built site."""

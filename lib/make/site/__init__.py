"""The published site (``make html``): ``build`` writes it, ``chapters`` reads the executed chapters,
``pages`` writes the pages' HTML and ``linkcheck`` checks the built site."""

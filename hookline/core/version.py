"""Hookline's version: the package's ``hookline.__version__``, the User-Agent of every attempt
(``hookline.delivery.sender``) and ``hookline --version``; the same as pyproject.toml's."""

__version__ = "0.2.0"

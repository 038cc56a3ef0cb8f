"""The two exceptions every module may raise: the package's base class, and `BadResponse`.

The lowest module of the package: the readers of the service's JSON (`_json`, `_models`,
`_mechanisms`, `_plan`) raise `BadResponse` from here, and `_exceptions`, which builds problem
exceptions carrying parsed models, imports those readers; both sides import this one downward.
`_exceptions` re-exports both, so they are also `dirichlet_release.BadResponse` and
`dirichlet_release.DirichletError`.
"""

__all__ = ["BadResponse", "DirichletError"]


class DirichletError(Exception):
    """Base class of every exception this package raises."""


class BadResponse(DirichletError):
    """The service answered something this client cannot read (not JSON, or missing a field)."""

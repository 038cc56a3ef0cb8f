"""The mechanisms the service runs, as it lists them (``GET /v1/mechanisms``).

The client keeps no table of mechanisms or of their fields: what a mechanism takes, how it reads
`epsilon` and what it supports come from the service, read once per client
(`Client.mechanisms`). A mechanism added to the service is known to the client without a new
release of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Union

from . import _json as j
from ._errors import BadResponse

__all__ = ["MechanismField", "MechanismInfo", "Mechanisms"]

# How a mechanism reads `epsilon`: the client acts on it (`MechanismInfo.runs_given`), so a value
# it does not know is refused rather than guessed at. A field's `type` and a mechanism's
# `forecast` are descriptive and read as any string.
EPSILON_USES = ("target", "target_or_cap", "cap", "pure")


@dataclass(frozen=True)
class MechanismField:
    """One of a mechanism's own request fields (besides the common ones such as `epsilon`).

    Attributes:
        name: its member name in a release, a preview or a plan item (``prior``, ``r``, …); a
            keyword argument of `Client.release` and `Client.preview`.
        type: ``"number"``, or ``"number_or_numbers"`` (one number for every cell, or a list
            with one per cell).
        required: whether a release with this mechanism must give it.
        description: what it means, in the service's words.
        default: what the service uses when it is not given (a number or a list); None when
            its absence means something of its own (such as: calibrated from `epsilon`).
        plan: whether a plan item (`PlanItem.params`) takes it; a field such as
            ``lower_bound`` is for releases only, and the planner refuses it.

    """

    name: str
    type: str
    required: bool
    description: str
    default: Union[float, List[float], None] = None
    plan: bool = True

    @classmethod
    def from_json(cls, doc: Any) -> MechanismField:
        """Read the service's JSON."""
        what = "mechanism field"
        doc = j.obj(doc, what)
        name = j.string(j.get(doc, "name", what), f"{what} name")
        what = f"mechanism field {name}"
        default = doc.get("default")
        return cls(
            name=name,
            type=j.string(j.get(doc, "type", what), f"{what} type"),
            required=j.boolean(j.get(doc, "required", what), f"{what} required"),
            description=j.string(j.get(doc, "description", what), f"{what} description"),
            default=None if default is None else j.number_or_numbers(default, f"{what} default"),
            plan=j.boolean(j.get(doc, "plan", what), f"{what} plan"),
        )


@dataclass(frozen=True)
class MechanismInfo:
    """A mechanism as the service lists it: its fields and what it supports.

    Attributes:
        name: the name a request gives as `mechanism`.
        summary: what it does, in the service's words.
        default: True for the mechanism a release uses when it names none.
        epsilon: how it reads a request's `epsilon`: ``"target"`` (required; the mechanism is
            calibrated to it at `order`), ``"target_or_cap"`` (calibrated to it, unless the
            field `noise_field` is given: then the noise is fixed and `epsilon` is an optional
            cap), ``"cap"`` (its fields fix it; `epsilon` is an optional cap) or ``"pure"``
            (pure ε-DP at the required `epsilon`).
        order: whether it takes a calibration `order`.
        fields: its own fields, in the service's order.
        tables: whether it releases a `table` (rows over disjoint groups, one charge).
        lower_bound: whether it takes a public `lower_bound` on every cell.
        targets: the accuracy targets a plan can ask it to meet (``"l2"``, ``"cell_sd"``,
            ``"kl"``, …): the members of `Target` it answers.
        auto: whether a plan item's ``"auto"`` considers it.
        forecast: what a preview forecasts for it: ``"dirichlet"`` (ℓ2 error, per-cell
            variance, KL tail), ``"selection"`` (the exponential mechanism's), or None.
        noise_field: with ``"target_or_cap"``, the field that fixes the noise.

    """

    name: str
    summary: str
    default: bool
    epsilon: str
    order: bool
    fields: List[MechanismField]
    tables: bool
    lower_bound: bool
    targets: List[str]
    auto: bool
    forecast: Optional[str] = None
    noise_field: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: Any) -> MechanismInfo:
        """Read the service's JSON."""
        what = "mechanism"
        doc = j.obj(doc, what)
        name = j.string(j.get(doc, "name", what), "mechanism name")
        what = f"mechanism {name}"
        fields = j.get(doc, "fields", what)
        if not isinstance(fields, list):
            raise BadResponse(f"{what} fields: expected a list")
        info = cls(
            name=name,
            summary=j.string(j.get(doc, "summary", what), f"{what} summary"),
            default=j.boolean(j.get(doc, "default", what), f"{what} default"),
            epsilon=j.one_of(j.get(doc, "epsilon", what), EPSILON_USES, f"{what} epsilon"),
            order=j.boolean(j.get(doc, "order", what), f"{what} order"),
            fields=[MechanismField.from_json(f) for f in fields],
            tables=j.boolean(j.get(doc, "tables", what), f"{what} tables"),
            lower_bound=j.boolean(j.get(doc, "lower_bound", what), f"{what} lower_bound"),
            targets=j.strings(j.get(doc, "targets", what), f"{what} targets"),
            auto=j.boolean(j.get(doc, "auto", what), f"{what} auto"),
            forecast=j.opt_string(doc, "forecast", what),
            noise_field=j.opt_string(doc, "noise_field", what),
            raw=dict(doc),
        )
        names = info.field_names
        if len(set(names)) != len(names):
            raise BadResponse(f"{what}: a field is listed twice")
        if (info.epsilon == "target_or_cap") != (info.noise_field is not None):
            raise BadResponse(f"{what}: noise_field goes with epsilon target_or_cap, and only")
        if info.noise_field is not None and not info.takes(info.noise_field):
            raise BadResponse(f"{what}: noise_field is not one of its fields")
        return info

    @property
    def field_names(self) -> List[str]:
        """The names of its own fields, in the service's order."""
        return [f.name for f in self.fields]

    def takes(self, name: str) -> bool:
        """Whether `name` is one of its own fields."""
        return any(f.name == name for f in self.fields)

    def own_fields(self, values: Mapping[str, Any]) -> Dict[str, Any]:
        """The members of `values` that are its own fields (None ones left out), in its order."""
        return {f.name: values[f.name] for f in self.fields if values.get(f.name) is not None}

    def runs_given(self, values: Mapping[str, Any]) -> bool:
        """Whether, with the fields in `values`, it runs with its parameters as given.

        Then nothing is calibrated and a plan has no ε for it: its `epsilon` is a cap, or it is
        ``"target_or_cap"`` and `values` gives its `noise_field`.
        """
        if self.epsilon == "cap":
            return True
        return (
            self.epsilon == "target_or_cap"
            and self.noise_field is not None
            and values.get(self.noise_field) is not None
        )


@dataclass(frozen=True)
class Mechanisms:
    """Every mechanism the service runs, in its order (the planner's tie-break order).

    Iterating gives each `MechanismInfo`; ``mechanisms["gaussian"]`` looks one up by name
    (`KeyError` when the service has none of that name), ``"gaussian" in mechanisms`` tells.
    """

    mechanisms: List[MechanismInfo]
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, doc: Any) -> Mechanisms:
        """Read the service's JSON (the listing must name each mechanism once, one default)."""
        doc = j.obj(doc, "mechanisms")
        items = j.get(doc, "mechanisms", "mechanisms")
        if not isinstance(items, list):
            raise BadResponse("mechanisms: expected a list")
        listing = cls([MechanismInfo.from_json(m) for m in items], raw=dict(doc))
        if len(set(listing.names)) != len(listing.names):
            raise BadResponse("mechanisms: a mechanism is listed twice")
        if sum(m.default for m in listing.mechanisms) != 1:
            raise BadResponse("mechanisms: exactly one mechanism must be the default")
        return listing

    @property
    def names(self) -> List[str]:
        """Every mechanism's name, in the service's order."""
        return [m.name for m in self.mechanisms]

    @property
    def default(self) -> MechanismInfo:
        """The mechanism a release uses when it names none."""
        return next(m for m in self.mechanisms if m.default)

    def get(self, name: str) -> Optional[MechanismInfo]:
        """The mechanism called `name`, or None when the service has none of that name."""
        return next((m for m in self.mechanisms if m.name == name), None)

    def __getitem__(self, name: str) -> MechanismInfo:
        found = self.get(name)
        if found is None:
            raise KeyError(name)
        return found

    def __contains__(self, name: object) -> bool:
        return any(m.name == name for m in self.mechanisms)

    def __iter__(self) -> Iterator[MechanismInfo]:
        return iter(self.mechanisms)

    def __len__(self) -> int:
        return len(self.mechanisms)

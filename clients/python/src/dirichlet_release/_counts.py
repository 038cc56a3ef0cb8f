"""Counts in, distributions out: lists, numpy arrays, pandas Series and DataFrames.

numpy and pandas are optional. They are never imported here: an object can only be a pandas or
numpy object if its package is already imported, so `sys.modules` tells which it may be.
"""

from __future__ import annotations

import math
import sys
import unicodedata
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional, Sequence, Union

from ._exceptions import CellsMismatch

__all__ = ["Shape", "has_labels", "prepare_counts", "prepare_row_names", "to_jsonable"]

Number = Union[int, float]


@dataclass(frozen=True)
class Shape:
    """What the output should look like: the request's form and, for pandas, its labels."""

    table: bool
    index: Any = None  # a pandas Index (rows of a table, cells of a vector), when pandas went in
    columns: Any = None  # a pandas Index of a table's cells, when a DataFrame went in


def _pandas() -> Any:
    return sys.modules.get("pandas")


def _numpy() -> Any:
    return sys.modules.get("numpy")


def _is_series(value: Any) -> bool:
    pd = _pandas()
    return pd is not None and isinstance(value, pd.Series)


def _is_frame(value: Any) -> bool:
    pd = _pandas()
    return pd is not None and isinstance(value, pd.DataFrame)


def _is_ndarray(value: Any) -> bool:
    np = _numpy()
    return np is not None and isinstance(value, np.ndarray)


def _number(value: Any, where: str) -> Number:
    # bool is an int in Python but never a count.
    if isinstance(value, bool):
        raise TypeError(f"{where}: a boolean is not a number")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        number: Number = value
    else:
        np = _numpy()
        if np is not None and isinstance(value, np.generic) and not isinstance(value, np.bool_):
            number = value.item()
        else:
            raise TypeError(f"{where}: expected a number, got {type(value).__name__}")
    # NaN and ±inf are not JSON; refuse them here rather than send an invalid body. The value
    # itself is not quoted: counts never appear in messages.
    if isinstance(number, float) and not math.isfinite(number):
        raise ValueError(f"{where}: every value must be finite (NaN or infinity found)")
    return number


def _vector(values: Sequence[Any], where: str) -> List[Number]:
    return [_number(v, f"{where}[{i}]") for i, v in enumerate(values)]


def to_jsonable(value: Any, where: str) -> Any:
    """A parameter value (a number, a list, an array, a Series) as plain JSON values."""
    if value is None or isinstance(value, (str, bool, dict)):
        return value
    if _is_series(value) or _is_frame(value) or _is_ndarray(value):
        value = value.values.tolist() if not _is_ndarray(value) else value.tolist()
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return _number(value, where)


def has_labels(counts: Any) -> bool:
    """True for the inputs whose labels name cells: a `pandas.Series` or `pandas.DataFrame`."""
    return _is_series(counts) or _is_frame(counts)


_CELL_LABELS = (
    "the dataset names its cells, so pandas input is aligned to them by name and its labels "
    "must be strings; pass a list or an array to send values by position"
)
_ROW_NAMES = "row names must be strings; pass row_names=[…] with the public names of the rows"


def _string_labels(labels: Any, what: str, why: str) -> List[str]:
    names = list(labels)
    if not all(isinstance(name, str) for name in names):
        raise TypeError(f"{what}: {why}")
    return names


def _stored_form(name: str) -> str:
    """A name as the service stores it: surrounding whitespace trimmed, in Unicode NFC."""
    return unicodedata.normalize("NFC", name.strip())


def _positions(labels: Any, cells: Sequence[str], what: str) -> List[int]:
    """Where each of `cells` is among `labels`: the order that aligns the input to the cells.

    Labels are compared in the form the service stores names in, so that the labels a dataset
    was registered from still match its (trimmed, normalised) cells.
    """
    names = _string_labels(labels, what, _CELL_LABELS)
    where = {_stored_form(name): i for i, name in enumerate(names)}
    if len(where) != len(names):
        raise ValueError(f"{what} repeats a label; each cell must appear once (nothing was sent)")
    known = {_stored_form(cell) for cell in cells}
    missing = [cell for cell in cells if _stored_form(cell) not in where]
    extra = [name for name in names if _stored_form(name) not in known]
    if missing or extra:
        raise CellsMismatch(what, missing, extra)
    return [where[_stored_form(cell)] for cell in cells]


def _labels(names: Sequence[str], like: Any) -> Any:
    """A pandas Index of `names`, named like the pandas Index `like`."""
    return _pandas().Index(list(names), name=getattr(like, "name", None))


def prepare_counts(counts: Any, cells: Optional[Sequence[str]] = None) -> tuple[str, Any, Shape]:
    """The request member (``counts`` or ``table``), its JSON value, and the output's shape.

    A list of numbers, a 1-D numpy array or a `pandas.Series` is one vector; a list of lists, a
    2-D array or a `pandas.DataFrame` (one row per group, one column per cell) is a table.

    With `cells` (the dataset's cell names), a Series' index or a DataFrame's columns are
    aligned to them by name: the values are sent in the dataset's order, and a missing or an
    extra name raises `CellsMismatch` before anything is sent. Lists and arrays are sent as
    they are (by position).
    """
    if _is_frame(counts):
        rows = counts.to_numpy().tolist()
        columns = counts.columns
        if cells is not None:
            at = _positions(counts.columns, cells, "the DataFrame's columns")
            rows = [[row[i] for i in at] for row in rows]
            columns = _labels(cells, counts.columns)
        table = [_vector(row, f"table[{i}]") for i, row in enumerate(rows)]
        return "table", table, Shape(table=True, index=counts.index, columns=columns)
    if _is_series(counts):
        values = counts.tolist()
        index = counts.index
        if cells is not None:
            at = _positions(counts.index, cells, "the Series' index")
            values = [values[i] for i in at]
            index = _labels(cells, counts.index)
        return "counts", _vector(values, "counts"), Shape(table=False, index=index)
    if _is_ndarray(counts):
        if counts.ndim == 1:
            return "counts", _vector(counts.tolist(), "counts"), Shape(table=False)
        if counts.ndim == 2:
            rows = counts.tolist()
            table = [_vector(row, f"table[{i}]") for i, row in enumerate(rows)]
            return "table", table, Shape(table=True)
        raise ValueError(
            f"counts: a {counts.ndim}-dimensional array; give 1 (a vector) or 2 (a table)"
        )
    if isinstance(counts, (str, bytes)) or not isinstance(counts, Sequence):
        raise TypeError(
            "counts must be a list, a numpy array, a pandas Series or a pandas DataFrame, "
            f"not {type(counts).__name__}"
        )
    if len(counts) > 0 and all(
        isinstance(row, (list, tuple)) or _is_ndarray(row) or _is_series(row) for row in counts
    ):
        table = [_vector(list(row), f"table[{i}]") for i, row in enumerate(counts)]
        return "table", table, Shape(table=True)
    return "counts", _vector(counts, "counts"), Shape(table=False)


def prepare_row_names(row_names: Any, counts: Any) -> Optional[List[str]]:
    """The ``row_names`` to send: only those the caller asked for, never by default.

    None or False sends none. True sends a DataFrame's index (its labels must be strings); a
    list (or a pandas Index) is sent as given, for the service to check against the table.
    A crosstab's index lists only the groups that occur in the data, so sending it unchanged
    would publish which groups are empty: reindex to the public list of groups first.
    """
    if row_names is None or row_names is False:
        return None
    if row_names is True:
        if not _is_frame(counts):
            raise TypeError("row_names=True sends a DataFrame's index; counts is not a DataFrame")
        return _string_labels(counts.index, "row_names=True: the DataFrame's index", _ROW_NAMES)
    if isinstance(row_names, (str, bytes)):
        raise TypeError("row_names must be a list of names (one per row), not one string")
    if not isinstance(row_names, Iterable):
        raise TypeError(
            f"row_names must be None, True or a list of names, not {type(row_names).__name__}"
        )
    return _string_labels(row_names, "row_names", _ROW_NAMES)


def shape_distribution(values: List[float], shape: Shape, cells: Optional[List[str]]) -> Any:
    """A vector release's output: a `pandas.Series` when a Series went in, else the list.

    The Series is indexed by the dataset's `cells` when it has them (the input was aligned to
    them), else by the input's index.
    """
    pd = _pandas()
    if shape.index is not None and pd is not None:
        index = _labels(cells, shape.index) if cells is not None else shape.index
        return pd.Series(values, index=index, dtype="float64", name="probability")
    return values


def shape_distributions(
    rows: List[List[float]],
    shape: Shape,
    cells: Optional[List[str]],
    row_names: Optional[List[str]],
) -> Any:
    """A table release's output: a `pandas.DataFrame` when a DataFrame went in, else the rows.

    Its columns are the dataset's `cells` when it has them, else the input's columns; its rows
    are the release's `row_names` when it has them, else the input's index.
    """
    pd = _pandas()
    if shape.columns is not None and pd is not None:
        columns = _labels(cells, shape.columns) if cells is not None else shape.columns
        index = _labels(row_names, shape.index) if row_names is not None else shape.index
        return pd.DataFrame(rows, index=index, columns=columns, dtype="float64")
    return rows


def shape_forecasts(forecasts: Optional[List[Any]], shape: Shape) -> Any:
    """A table preview's per-row forecasts: a `pandas.Series` over a DataFrame's rows."""
    pd = _pandas()
    if forecasts is not None and shape.columns is not None and pd is not None:
        return pd.Series(forecasts, index=shape.index, dtype="object", name="forecast")
    return forecasts

"""Counts in, distributions out: lists, numpy arrays, pandas Series and DataFrames.

numpy and pandas are optional. They are never imported here: an object can only be a pandas or
numpy object if its package is already imported, so `sys.modules` tells which it may be.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Union

__all__ = ["Shape", "prepare_counts", "to_jsonable"]

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


def prepare_counts(counts: Any) -> tuple[str, Any, Shape]:
    """The request member (``counts`` or ``table``), its JSON value, and the output's shape.

    A list of numbers, a 1-D numpy array or a `pandas.Series` is one vector; a list of lists, a
    2-D array or a `pandas.DataFrame` (one row per group, one column per cell) is a table.
    """
    if _is_frame(counts):
        rows = counts.to_numpy().tolist()
        table = [_vector(row, f"table[{i}]") for i, row in enumerate(rows)]
        return "table", table, Shape(table=True, index=counts.index, columns=counts.columns)
    if _is_series(counts):
        return "counts", _vector(counts.tolist(), "counts"), Shape(table=False, index=counts.index)
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


def shape_distribution(values: List[float], shape: Shape) -> Any:
    """A vector release's output: a `pandas.Series` with the input's index, else the list."""
    pd = _pandas()
    if shape.index is not None and pd is not None:
        return pd.Series(values, index=shape.index, dtype="float64", name="probability")
    return values


def shape_distributions(rows: List[List[float]], shape: Shape) -> Any:
    """A table release's output: a `pandas.DataFrame` with the input's labels, else the rows."""
    pd = _pandas()
    if shape.columns is not None and pd is not None:
        return pd.DataFrame(rows, index=shape.index, columns=shape.columns, dtype="float64")
    return rows


def shape_forecasts(forecasts: Optional[List[Any]], shape: Shape) -> Any:
    """A table preview's per-row forecasts: a `pandas.Series` over a DataFrame's rows."""
    pd = _pandas()
    if forecasts is not None and shape.columns is not None and pd is not None:
        return pd.Series(forecasts, index=shape.index, dtype="object", name="forecast")
    return forecasts
